#!/usr/bin/env bash
# Builds, on the build machine, what benchmarks/gpu_run.sh carries to the GPU machine (Python 3.12,
# no network there). All outputs are ignored by git (add them to .git/info/exclude):
#   .whl/                      iree-base-runtime + pure-Python test tools + ml_dtypes (cp312 wheels)
#   .gpu_rt/site.tar.xz        the same wheels unpacked, without IREE's tracy runtime and tools
#   .gpu/iree_compiler.tar.xz  iree-base-compiler unpacked, libIREECompiler.so stripped
#   .cudnn_whl/                NVIDIA's nvidia-cudnn-frontend wheel (side-by-side runs, FE suite)
# Usage: bash benchmarks/prep_gpu_carry.sh        (from the repository root)
set -eu
PY=${PYTHON:-python3}
IREE=${IREE_VERSION:-3.13.0}
dl() { $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
          --platform any "$@"; }
mkdir -p .whl .gpu_rt .gpu .cudnn_whl
dl -d .whl "iree-base-runtime==$IREE" pytest pluggy iniconfig packaging flatbuffers ml_dtypes
dl -d .cudnn_whl nvidia-cudnn-frontend
tmp=$(mktemp -d)
mkdir -p "$tmp/site" "$tmp/comp"
for w in .whl/*.whl; do $PY -m zipfile -e "$w" "$tmp/site"; done
rm -rf "$tmp/site/iree/_runtime_libs_tracy" "$tmp/site/iree/_runtime_libs/iree-"* "$tmp/site/"*.dist-info/RECORD 2>/dev/null || true
tar -C "$tmp/site" -cJf .gpu_rt/site.tar.xz .
dl -d "$tmp" "iree-base-compiler==$IREE"
$PY -m zipfile -e "$tmp"/iree_base_compiler-*.whl "$tmp/comp"
strip --strip-unneeded "$tmp/comp/iree/compiler/_mlir_libs/libIREECompiler.so"
tar -C "$tmp/comp" -cJf .gpu/iree_compiler.tar.xz .
rm -rf "$tmp"
ls -la .whl .cudnn_whl .gpu_rt .gpu
