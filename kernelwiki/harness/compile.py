"""Compile-only evidence: emitted PTX and SASS, and the instructions a probe expects in them.

CuTe DSL kernels are compiled with fake tensors (`cute.compile(..., options="--gpu-arch sm_90a")`),
which needs no GPU; the compiled object carries `__ptx__` and `__cubin__`. CUDA C++ probes are
compiled with nvcc for `compute_90a` (`nvcc`), and built into a shared library (`nvcc_library`)
when a probe launches them through ctypes. SASS comes from nvdisasm (the `nvidia-cuda-nvdisasm`
package or the CUDA toolkit); when no disassembler exists, only the PTX is scanned and the record
says so.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Emitted:
    """What the compiler produced for one architecture."""

    arch: str
    ptx: str = ""
    sass: str | None = None
    """None when no disassembler was available."""
    notes: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)
    """What a compile-time probe observed besides the code (e.g. "default-target:sm_100a");
    matched by expected entries written "fact:<text>"."""

    def extend(self, other: "Emitted") -> None:
        """Add another kernel's code (one probe scanning several compiled kernels); the SASS stays
        None unless both have it."""
        self.ptx += other.ptx
        self.sass = self.sass + other.sass if self.sass is not None and other.sass is not None else None


def nvdisasm() -> str | None:
    """Path of nvdisasm: on PATH, in the CUDA toolkit, or from the nvidia-cuda-nvdisasm wheel."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm")]
    for base in sys.path:
        candidates += glob.glob(os.path.join(base, "nvidia", "cu*", "bin", "nvdisasm"))
        candidates += glob.glob(os.path.join(base, "nvidia", "cuda_nvdisasm", "bin", "nvdisasm"))
    return next((c for c in candidates if os.path.isfile(c) and os.access(c, os.X_OK)), None)


def disassemble(cubin: bytes) -> str | None:
    tool = nvdisasm()
    if tool is None or not cubin:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(cubin)
        handle.flush()
        result = subprocess.run([tool, handle.name], capture_output=True, text=True, timeout=120)
    return result.stdout if result.returncode == 0 else None


def _kept(value, binary: bool):
    """`__ptx__`/`__cubin__` hold the content, or (with --dump-dir) the path of the dumped file."""
    if isinstance(value, str) and len(value) < 4096 and os.path.isfile(value):
        with open(value, "rb" if binary else "r") as handle:
            return handle.read()
    return value


def from_cute(compiled, arch: str) -> Emitted:
    """PTX and SASS of a `cute.compile(...)` result (compile with --keep-ptx --keep-cubin)."""
    emitted = Emitted(arch, ptx=_kept(getattr(compiled, "__ptx__", None), binary=False) or "")
    cubin = _kept(getattr(compiled, "__cubin__", None), binary=True)
    emitted.sass = disassemble(cubin) if cubin else None
    if emitted.sass is None:
        emitted.notes.append("no SASS: nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    return emitted


def _nvcc_run(arguments: list[str], arch: str) -> str:
    """Run nvcc once; its stderr tail becomes the error a user can act on. Returns its stderr (where
    ptxas writes its -v report and its warnings)."""
    compiler = shutil.which("nvcc")
    if compiler is None:
        raise RuntimeError("nvcc not found: install the CUDA toolkit (CUDA 13.0) or run on the GPU machine")
    result = subprocess.run([compiler, "-std=c++17", "-O3", *arguments], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"nvcc failed for {arch}:\n{result.stderr[-4000:]}")
    return result.stderr


def nvcc(source: Path, arch: str, extra: list[str] | None = None) -> Emitted:
    """Compile a .cu file for one architecture-specific target; PTX and SASS of it."""
    number = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        for flags, out in ((["-ptx", f"-arch=compute_{number}"], ptx), (["-cubin", f"-arch=sm_{number}"], cubin)):
            _nvcc_run([*(extra or []), *flags, str(source), "-o", str(out)], arch)
        emitted = Emitted(arch, ptx=ptx.read_text())
        emitted.sass = disassemble(cubin.read_bytes())
    if emitted.sass is None:
        emitted.notes.append("no SASS: nvdisasm not found")
    return emitted


def nvcc_library(source: Path, arch: str, extra: list[str] | None = None) -> ctypes.CDLL:
    """Build a .cu file (kernels plus extern "C" host launchers) into a shared library for one
    architecture-specific target and load it. The launchers take the CUDA stream as an argument, so
    a caller passes torch's current stream and graph capture sees the launches. The file is removed
    after loading (the loader keeps its mapping)."""
    number = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory() as tmp:
        library = Path(tmp) / f"{source.stem}.so"
        _nvcc_run([*(extra or []), "-shared", "-Xcompiler", "-fPIC",
                   f"-gencode=arch=compute_{number},code=sm_{number}", str(source), "-o", str(library)], arch)
        return ctypes.CDLL(str(library))


_PTXAS_FUNCTION = re.compile(r"Function properties for (\S+)\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
                             r"(\d+) bytes spill loads\n[^\n]*Used (\d+) registers")


def ptxas_usage(source: Path, arch: str, extra: list[str] | None = None) -> tuple[dict[str, dict], str]:
    """Build a .cu file to a cubin with `-Xptxas -v` and read ptxas's report: per kernel (mangled
    name), registers per thread and the bytes of stack frame and spill stores/loads per thread (the
    compiler's own account of spills; SASS shows them as STL/LDL). Also returns the report itself,
    whose warnings (e.g. C7508, setmaxnreg ignored) a probe may look for."""
    number = arch.removeprefix("sm_")
    with tempfile.TemporaryDirectory() as tmp:
        report = _nvcc_run([*(extra or []), "-Xptxas", "-v", "-cubin", f"-arch=sm_{number}", str(source),
                            "-o", str(Path(tmp) / "k.cubin")], arch)
    return parse_ptxas_usage(report), report


def parse_ptxas_usage(report: str) -> dict[str, dict]:
    """{kernel: {registers, stack_frame_bytes, spill_store_bytes, spill_load_bytes}} from a ptxas -v report."""
    return {m[1]: {"registers": int(m[5]), "stack_frame_bytes": int(m[2]), "spill_store_bytes": int(m[3]),
                   "spill_load_bytes": int(m[4])} for m in _PTXAS_FUNCTION.finditer(report)}


def scan(emitted: Emitted, expected: list[str]) -> dict:
    """Which expected mnemonics occur in the PTX or SASS (SASS mnemonics are upper case), and which
    expected facts ("fact:...") the probe observed."""
    found, missing = [], []
    for mnemonic in expected:
        if mnemonic.startswith("fact:"):
            (found if mnemonic.removeprefix("fact:") in emitted.facts else missing).append(mnemonic)
            continue
        haystack = emitted.sass if mnemonic.isupper() else emitted.ptx
        if haystack is None:
            missing.append(mnemonic)
        elif mnemonic in haystack:
            found.append(mnemonic)
        else:
            missing.append(mnemonic)
    result = {"found": found, "missing": missing, "ptx_bytes": len(emitted.ptx),
              "sass_scanned": emitted.sass is not None}
    if emitted.notes:
        result["notes"] = emitted.notes
    if emitted.facts:
        result["facts"] = emitted.facts
    return result
