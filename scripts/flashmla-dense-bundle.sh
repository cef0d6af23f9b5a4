#!/usr/bin/env bash
# Build FlashMLA's sm_90a DENSE MLA decode (bf16 paged KV cache) as the subject of probe-dense-mla-decode:
# .device/flashmla-dense.tar.xz and .device/flashmla-dense.sh, never committed (.device/ is git-ignored).
# Usage (from the project root):
#   bash scripts/flashmla-dense-bundle.sh FLASHMLA_GIT_DIR CUTLASS_GIT_DIR
# (git directories of github:deepseek-ai/FlashMLA and github:NVIDIA/cutlass, e.g. from the `fetch` tool:
# /work/.mirror/deepseek-ai+FlashMLA/repo and /work/.mirror/NVIDIA+cutlass/repo).
# Revision: FlashMLA 9241ae3 with the CUTLASS headers of its submodule pin (147f567). Compiled, and nothing else:
# the dense decode's bf16 instantiation (csrc/sm90/decode/dense), the scheduler metadata and the split-KV combine
# (csrc/smxx/decode) it launches, and a binding of dense_decode_fwd only. The fp16 instantiation is left out with
# FlashMLA's own switch (-DFLASH_MLA_DISABLE_FP16: the dispatcher then refuses fp16 instead of referencing it);
# the dense path references no sm_100 symbol, so no stubs are needed. The .cu files compile on a CPU machine with
# nvcc alone (`python3 build.py --flags` in the unpacked bundle lists the sources and flags); the binding needs torch.
# On the GPU machine (its own python3 has torch and ninja; .device/prelude.sh is not needed):
#   source .device/flashmla-dense.sh   # unpacks, builds once per machine (about 1 minute on 16 cores), sets PYTHONPATH
#   python3 -c 'import flash_mla.cuda as c; print(c.dense_decode_fwd)'
# Source it AFTER .device/flashmla.sh when both are used: its flash_mla package comes first on PYTHONPATH and also
# exposes the sparse decode of that bundle's build when it is there.
set -euo pipefail
fm_git=$1; cutlass_git=$2
FM_REV=${FM_REV:-9241ae3}
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/fm/csrc/cutlass" "$top/.device"
git --git-dir="$fm_git" archive "$FM_REV" csrc/api/common.h csrc/api/dense_decode.h csrc/params.h csrc/defines.h \
  csrc/utils.h csrc/kerutils csrc/sm90/decode/dense csrc/smxx/decode flash_mla LICENSE | tar -x -C "$work/fm"
rm -f "$work/fm/csrc/sm90/decode/dense/instantiations/fp16.cu"
cutlass_rev=$(git --git-dir="$fm_git" ls-tree "$FM_REV" csrc/cutlass | awk '{print $3}')
# CUTLASS's headers only: cute/ and cutlass/ (no tools/, no docs, no examples). A partial mirror lacking blobs
# outside include/ makes git archive complain about them on stderr; what matters is checked after.
git --git-dir="$cutlass_git" archive "$cutlass_rev" include 2>/dev/null | tar -x -C "$work/fm/csrc/cutlass"
for header in cute/tensor.hpp cutlass/cutlass.h cutlass/arch/barrier.h; do
  [ -f "$work/fm/csrc/cutlass/include/$header" ] || { echo "CUTLASS $cutlass_rev: include/$header missing" >&2; exit 1; }
done
cat > "$work/fm/csrc/api_dense_decode.cpp" <<'CPP'
// Only the dense decode entry point (the full api.cpp also binds the sparse and sm_100 kernels).
#include <pybind11/pybind11.h>
#include "api/dense_decode.h"
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("dense_decode_fwd", &dense_attn_decode_interface); }
CPP
cat > "$work/fm/build.py" <<'PY'
"""Build flash_mla_dense_cuda (FlashMLA's sm_90a dense decode only) with torch's JIT extension builder.

`python3 build.py BUILD_DIR` builds it; `python3 build.py --flags` prints the sources and flags, one per line,
for a compile check without torch's builder."""
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
c = os.path.join(here, "csrc")
SOURCES = ["api_dense_decode.cpp", "smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu",
           "smxx/decode/combine/combine.cu", "sm90/decode/dense/instantiations/bf16.cu"]
FEATURES = ["-DFLASH_MLA_DISABLE_FP16"]
CXX_FLAGS = ["-O3", "-std=c++20", "-DNDEBUG", "-Wno-deprecated-declarations"] + FEATURES
NVCC_FLAGS = ["-O3", "-std=c++20", "-DNDEBUG", "-D_USE_MATH_DEFINES", "-Wno-deprecated-declarations",
              "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__",
              "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "--use_fast_math", "-gencode", "arch=compute_90a,code=sm_90a"] + FEATURES
INCLUDES = [c, f"{c}/kerutils/include", f"{c}/sm90", f"{c}/cutlass/include"]
if sys.argv[1:] == ["--flags"]:
    print("\n".join(["SOURCES"] + [os.path.join(c, s) for s in SOURCES] + ["NVCC"] + NVCC_FLAGS
                    + ["CXX"] + CXX_FLAGS + ["INCLUDES"] + INCLUDES))
    sys.exit(0)
from torch.utils.cpp_extension import CUDA_HOME, load
# CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl, which nvcc adds itself but the host compiler of
# the .cpp binding does not (the first H200 build failed there: cuda/std/utility not found)
cccl = os.path.join(CUDA_HOME or "/usr/local/cuda", "include", "cccl")
if os.path.isdir(cccl):
    INCLUDES.append(cccl)
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 8))
t = time.time()
mod = load("flash_mla_dense_cuda", [os.path.join(c, s) for s in SOURCES], extra_cflags=CXX_FLAGS,
           extra_cuda_cflags=NVCC_FLAGS, extra_include_paths=INCLUDES, build_directory=sys.argv[1], verbose=False)
print(f"built {mod.__file__} in {time.time() - t:.0f} s")
PY
echo "deepseek-ai/FlashMLA $FM_REV cutlass $cutlass_rev (dense decode only)" > "$work/fm/REVISION"
tar cJf "$top/.device/flashmla-dense.tar.xz" -C "$work" fm
cat > "$top/.device/flashmla-dense.sh" <<'SH'
# Sourced on the GPU machine (prelude.sh is not needed): unpack FlashMLA, build its sm_90a dense decode once, import path.
_fmd_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_fmd_site=${TMPDIR:-/tmp}/kernelwiki-flashmla-dense
_fmd_sparse=${TMPDIR:-/tmp}/kernelwiki-flashmla/build   # where .device/flashmla.sh builds the sparse decode
[ -f "$_fmd_site/fm/REVISION" ] || { mkdir -p "$_fmd_site" && tar xJf "$_fmd_dir/flashmla-dense.tar.xz" -C "$_fmd_site"; }
mkdir -p "$_fmd_site/build"
ls "$_fmd_site"/build/flash_mla_dense_cuda*.so >/dev/null 2>&1 || python3 "$_fmd_site/fm/build.py" "$_fmd_site/build" >&2
# flash_mla/flash_mla_interface.py imports flash_mla.cuda: a shim maps it to the built module(s)
mkdir -p "$_fmd_site/pkg/flash_mla"
cp "$_fmd_site"/fm/flash_mla/*.py "$_fmd_site/pkg/flash_mla/"
cat > "$_fmd_site/pkg/flash_mla/cuda.py" <<PYX
import glob as _g, importlib.util as _u
def _load(name, pattern):
    found = _g.glob(pattern)
    if not found:
        return None
    spec = _u.spec_from_file_location(name, found[0]); mod = _u.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod
_dense = _load("flash_mla_dense_cuda", "$_fmd_site/build/flash_mla_dense_cuda*.so")
if _dense is None:
    raise ImportError("FlashMLA dense decode was not built: source .device/flashmla-dense.sh")
dense_decode_fwd = _dense.dense_decode_fwd
_sparse = _load("flash_mla_cuda", "$_fmd_sparse/flash_mla_cuda*.so")   # the sparse bundle's build, if any
if _sparse is not None:
    sparse_decode_fwd = _sparse.sparse_decode_fwd
def __getattr__(name):
    raise AttributeError(f"flash_mla.cuda.{name} is not built in this bundle (dense decode, and sparse decode where .device/flashmla.sh built it)")
PYX
export PYTHONPATH="$_fmd_site/pkg${PYTHONPATH:+:$PYTHONPATH}"
unset _fmd_dir _fmd_site _fmd_sparse
SH
du -sh "$top/.device/flashmla-dense.tar.xz" >&2
