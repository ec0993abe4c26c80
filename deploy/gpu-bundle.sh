#!/usr/bin/env bash
# Builds what deploy/gpu-check.sh runs, here, and packs it for a GPU machine whose image
# lacks deploy/install-deps.sh's Debian packages (a bare CUDA image, as the device
# machines have): OUT_DIR/bundle.tar.xz holds the executables (baton, baton-worker,
# test_cuda_ops, bench_gpu, test_nccl; sm_90), the CUDA engine baton-worker loads for GPU
# stages (lib/baton-cuda.so: ../lib/ from libexec/), and every shared library they load
# except the C library's, the C++ runtime's and CUDA's own (libcudart, libcublasLt, libnccl and
# the driver come from the GPU machine). Each executable is reached through a wrapper in
# bin/ that puts the bundle's lib/ (and $BATON_BUNDLE_CUDA_LIBS, the GPU machine's CUDA
# library folders, which gpu-check.sh finds) on LD_LIBRARY_PATH for that program alone.
# There: deploy/gpu-check.sh --bundle OUT_DIR/bundle.tar.xz [CHECK_OUT_DIR].
#   deploy/gpu-bundle.sh [OUT_DIR]     (default .gpu-bundle, which git ignores)
# Needs nvcc (CUDA 13) and the Debian packages here; the build goes to $BATON_BUNDLE_BUILD
# (default build-gpu-bundle).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$src/.gpu-bundle}" && cd "${1:-$src/.gpu-bundle}" && pwd)
build=${BATON_BUNDLE_BUILD:-$src/build-gpu-bundle}
exes=(bin/baton bin/baton-worker tests/test_cuda_ops bin/bench_gpu tests/test_nccl)

cmake -S "$src" -B "$build" -DBATON_CUDA=ON -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target baton baton-worker baton-cuda test_cuda_ops \
  bench_gpu test_nccl >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/baton-bundle
mkdir -p "$root/bin" "$root/libexec" "$root/lib"

# Libraries the GPU machine provides itself: glibc's, the compiler runtime's, CUDA's.
provided='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libnccl)\.so'
bundle_libs() { # FILE: copies the libraries FILE loads that the GPU machine lacks to lib/
  ldd "$1" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | while read -r so path; do
    if [[ ! $so =~ $provided && ! -e $root/lib/$so ]]; then
      cp -L "$path" "$root/lib/$so"
    fi
  done
}
for e in "${exes[@]}"; do
  name=$(basename "$e")
  cp "$build/$e" "$root/libexec/$name"
  cat >"$root/bin/$name" <<EOF
#!/bin/sh
# baton bundle (deploy/gpu-bundle.sh): $name with the bundle's libraries.
d=\$(dirname "\$(readlink -f "\$0")")/..
LD_LIBRARY_PATH="\$d/lib\${BATON_BUNDLE_CUDA_LIBS:+:\$BATON_BUNDLE_CUDA_LIBS}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" \\
  exec "\$d/libexec/$name" "\$@"
EOF
  chmod +x "$root/bin/$name"
  bundle_libs "$build/$e"
done
cp "$build/lib/baton-cuda.so" "$root/lib/"
bundle_libs "$build/lib/baton-cuda.so"
git -C "$src" rev-parse HEAD >"$root/COMMIT" 2>/dev/null || echo unknown >"$root/COMMIT"
# The sources it was built from (every tracked file as it is now), which gpu-check.sh
# compares with the tree it runs in: a bundle older than the tests it runs is refused.
(cd "$src" && git ls-files -z | xargs -0 sha256sum) >"$root/SOURCES.sha256"
tar -C "$stage" -cJf "$out/bundle.tar.xz" baton-bundle
echo "$out/bundle.tar.xz: $(du -h "$out/bundle.tar.xz" | cut -f1) ($(ls "$root/lib" | wc -l) libraries," \
  "$(du -sh "$root" | cut -f1) unpacked), commit $(cat "$root/COMMIT")"
