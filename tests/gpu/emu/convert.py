#!/usr/bin/python3
"""Turns a CUDA source of worker/cuda into C++ for the CPU emulation (tests/gpu/emu).

  convert.py SRC.cu DST.cpp     kernel launches K<<<grid, block, shm, stream>>>(args) become
                                emu::launch(emu::cfg(grid, block, shm, stream), K, args);
                                NULL becomes nullptr (launch arguments are converted to the
                                kernel's parameter types, which a 0L would not be);
                                extern __shared__ [__align__(n)] T name[]; (dynamic shared
                                memory) becomes T *name = (T *)emu::dyn_shared();
  convert.py --header SRC DST   cuda_internal.cuh with cuda_grid capped at 3 blocks: the
                                grid-stride kernels then take many elements per thread,
                                which keeps the emulation fast and exercises their loops
Nothing else changes: the kernels run as written."""
import re
import sys


def main():
    if sys.argv[1] == "--header":
        src, dst = sys.argv[2], sys.argv[3]
        s = open(src).read()
        s, n = re.subn(r"if \(g > 65535u \* 8u\) g = 65535u \* 8u;", "if (g > 3u) g = 3u;", s)
        if n != 1:
            sys.exit("convert.py: cuda_grid's cap not found in " + src)
    else:
        src, dst = sys.argv[1], sys.argv[2]
        s = open(src).read()
        pat = re.compile(r"(\w+(?:<[^<>()]*>)?)\s*<<<(.*?)>>>\s*\(\s*", re.S)
        s = pat.sub(lambda m: "emu::launch(emu::cfg(%s), %s, " % (m.group(2), m.group(1)), s)
        s = re.sub(r"\bNULL\b", "nullptr", s)
        dyn = re.compile(r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?([\w\s]*?\w)\s+(\w+)\s*\[\s*\]\s*;")
        s = dyn.sub(lambda m: "{0} *{1} = ({0} *)emu::dyn_shared();".format(m.group(1), m.group(2)), s)
    open(dst, "w").write(s)


main()
