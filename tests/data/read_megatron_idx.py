#!/usr/bin/python3
"""An independent reader of the Megatron-LM indexed dataset format, written from the
format's description (megatron/core/datasets/indexed_dataset.py) with struct and numpy
only, to check what `baton data` writes. It shares no code with the C reader.

  read_megatron_idx.py dump PREFIX
  read_megatron_idx.py check-files PREFIX FILE...
      the documents are exactly the FILEs' bytes, in order, each followed by EOS
  read_megatron_idx.py check-fortunes TRAIN VALID FRACTION DIR
      TRAIN + VALID hold DIR's fortune entries (sorted files, no links, no binaries),
      split at lines holding only "%", dealt out by the floor((i+1)F) > floor(iF) rule
  read_megatron_idx.py check-passkey PREFIX N LENGTH
      N documents of LENGTH tokens; the key asked for at the end is the hidden one,
      its digits are tokens [LENGTH-7, LENGTH-2)

Exit status 0 when the check holds, 1 otherwise (with the reason on stderr).
"""
import math
import os
import re
import struct
import sys

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
          6: np.float64, 7: np.float32, 8: np.uint16}
EOS = 257


def read(prefix):
    """Returns (dtype, sequences, document_indices) read straight from the files."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    if idx[:9] != MAGIC:
        raise ValueError(f"{prefix}.idx: bad magic {idx[:9]!r}")
    version, = struct.unpack_from("<Q", idx, 9)
    code, = struct.unpack_from("<B", idx, 17)
    n_seq, n_doc = struct.unpack_from("<QQ", idx, 18)
    if version != 1:
        raise ValueError(f"version {version}")
    off = 34
    lengths = np.frombuffer(idx, dtype="<i4", count=n_seq, offset=off)
    off += 4 * n_seq
    pointers = np.frombuffer(idx, dtype="<i8", count=n_seq, offset=off)
    off += 8 * n_seq
    docs = np.frombuffer(idx, dtype="<i8", count=n_doc, offset=off)
    off += 8 * n_doc
    if off != len(idx) and off + n_seq != len(idx):
        raise ValueError(f"{prefix}.idx: {len(idx)} bytes, expected {off}")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    data = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r") if os.path.getsize(
        prefix + ".bin") else np.zeros(0, np.uint8)
    seqs = []
    for ln, ptr in zip(lengths.tolist(), pointers.tolist()):
        raw = data[ptr:ptr + ln * dtype.itemsize]
        if len(raw) != ln * dtype.itemsize:
            raise ValueError(f"{prefix}.bin: sequence at {ptr} runs past the end")
        seqs.append(np.frombuffer(raw.tobytes(), dtype=dtype).astype(np.int64))
    if docs[0] != 0 or docs[-1] != n_seq:
        raise ValueError(f"document indices {docs[:3]}...{docs[-3:]}")
    return DTYPES[code], seqs, docs


def documents(prefix):
    _, seqs, docs = read(prefix)
    out = []
    for d in range(len(docs) - 1):
        parts = seqs[docs[d]:docs[d + 1]]
        out.append(np.concatenate(parts) if parts else np.zeros(0, np.int64))
    return out


def as_tokens(data):
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64).tolist() + [EOS]


def compare(got, want, what):
    if len(got) != len(want):
        sys.exit(f"FAIL {what}: {len(got)} documents, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        if list(g) != list(w):
            sys.exit(f"FAIL {what}: document {i} differs ({len(g)} vs {len(w)} tokens)")
    print(f"ok {what}: {len(got)} documents, {sum(len(g) for g in got)} tokens")


def fortune_entries(data):
    entries, cur = [], b""
    lines = data.split(b"\n")
    for k, line in enumerate(lines):
        last = k == len(lines) - 1
        if line in (b"%", b"%\r"):
            entries.append(cur)
            cur = b""
        else:
            cur += line + (b"" if last else b"\n")
    entries.append(cur)
    return [e for e in entries if e]


def walk(top):
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        if os.path.islink(path):
            continue
        if os.path.isdir(path):
            yield from walk(path)
        elif os.path.isfile(path):
            yield path


def check_fortunes(train, valid, fraction, top):
    entries = []
    for path in walk(os.fsencode(top)):
        with open(path, "rb") as f:
            data = f.read()
        if b"\x00" in data[:8192]:
            continue
        entries += fortune_entries(data)
    want = ([], [])
    for i, e in enumerate(entries):
        is_valid = math.floor((i + 1) * fraction) > math.floor(i * fraction)
        want[1 if is_valid else 0].append(as_tokens(e))
    compare(documents(train), want[0], "fortunes train")
    if fraction > 0:
        compare(documents(valid), want[1], "fortunes valid")


def check_passkey(prefix, n, length):
    docs = documents(prefix)
    if len(docs) != n:
        sys.exit(f"FAIL passkey: {len(docs)} documents, expected {n}")
    keys = set()
    for i, d in enumerate(docs):
        if len(d) != length or d[-1] != EOS:
            sys.exit(f"FAIL passkey: document {i} has {len(d)} tokens, last {d[-1]}")
        text = bytes(d[:-1].astype(np.uint8)).decode("ascii")
        m = re.search(r"What is the pass key\? The pass key is (\d{5})\.$", text)
        if not m:
            sys.exit(f"FAIL passkey: document {i} does not end with the question")
        key = m.group(1)
        line = f"\nThe pass key is {key}. Remember it. {key} is the pass key.\n"
        if text.count(line) != 1 or text[length - 7:length - 2] != key:
            sys.exit(f"FAIL passkey: document {i}: key {key} not hidden once / not at the end")
        keys.add(key)
    print(f"ok passkey: {n} documents of {length} tokens, {len(keys)} distinct keys")


def main(argv):
    cmd = argv[1]
    if cmd == "dump":
        dtype, seqs, docs = read(argv[2])
        print(f"dtype {np.dtype(dtype).name} sequences {len(seqs)} documents {len(docs) - 1} "
              f"tokens {sum(len(s) for s in seqs)}")
    elif cmd == "check-files":
        want = []
        for path in argv[3:]:
            with open(path, "rb") as f:
                want.append(as_tokens(f.read()))
        compare(documents(argv[2]), want, f"files {argv[2]}")
    elif cmd == "check-fortunes":
        check_fortunes(argv[2], argv[3], float(argv[4]), argv[5])
    elif cmd == "check-passkey":
        check_passkey(argv[2], int(argv[3]), int(argv[4]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
