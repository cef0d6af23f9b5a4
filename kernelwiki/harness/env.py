"""Where a probe runs: GPU, architecture, driver, toolchain, clocks, commit."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# Compute capabilities whose architecture-specific ("a") target a probe compiles for.
ARCH_SUFFIX = {"9.0": "sm_90a", "10.0": "sm_100a", "10.3": "sm_103a", "12.0": "sm_120a"}


@dataclass(frozen=True)
class Gpu:
    name: str
    """As nvidia-smi prints it, e.g. 'NVIDIA H200'."""
    arch: str
    """sm_90a, sm_100a, ..."""
    driver: str


def detect_gpu() -> Gpu | None:
    """The first GPU nvidia-smi reports, or None (no driver, no GPU). Does not import torch."""
    if os.environ.get("KERNELWIKI_FAKE_GPU"):  # tests: "NAME,ARCH"; anything else is no GPU
        fields = [part.strip() for part in os.environ["KERNELWIKI_FAKE_GPU"].split(",")]
        if len(fields) != 2 or not fields[0] or not re.fullmatch(r"sm_[0-9]+[a-z]?", fields[1]):
            return None
        return Gpu(fields[0], fields[1], FAKE_DRIVER)
    out = _run(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"])
    fields = [part.strip() for part in out.splitlines()[0].split(",")] if out else []
    if len(fields) != 3 or not re.fullmatch(r"[0-9]+\.[0-9]+", fields[1]):
        return None  # no driver, no GPU, or an nvidia-smi whose answer we cannot read
    name, cap, driver = fields
    return Gpu(name, ARCH_SUFFIX.get(cap, "sm_" + cap.replace(".", "")), driver)


MAX_GPUS = 256
"""More GPUs than one host has: a KERNELWIKI_FAKE_GPU_COUNT above it is malformed."""


@dataclass(frozen=True)
class Device:
    """One GPU of this host, as the runner places a probe on it (CUDA_VISIBLE_DEVICES=index)."""
    index: int
    uuid: str
    gpu: Gpu


def list_gpus() -> list[Device]:
    """Every GPU of this host in nvidia-smi order; [] without a driver. Under KERNELWIKI_FAKE_GPU
    (tests), KERNELWIKI_FAKE_GPU_COUNT fake GPUs of that model (default 1)."""
    if os.environ.get("KERNELWIKI_FAKE_GPU"):
        gpu = detect_gpu()
        count = os.environ.get("KERNELWIKI_FAKE_GPU_COUNT") or "1"
        if gpu is None or not re.fullmatch(r"[0-9]{1,3}", count.strip()) or int(count) > MAX_GPUS:
            return []   # malformed, as detect_gpu reads it: no GPU
        return [Device(i, f"GPU-fake-{i:04d}", gpu) for i in range(int(count))]
    out = _run(["nvidia-smi", "--query-gpu=index,uuid,name,compute_cap,driver_version", "--format=csv,noheader"])
    devices = []
    for line in (out or "").splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != 5 or not re.fullmatch(r"[0-9]{1,3}", fields[0]) or not re.fullmatch(r"[0-9]+\.[0-9]+", fields[3]):
            return []   # an nvidia-smi whose answer we cannot read: no GPU, as for detect_gpu
        index, uuid, name, cap, driver = fields
        devices.append(Device(int(index), uuid, Gpu(name, ARCH_SUFFIX.get(cap, "sm_" + cap.replace(".", "")), driver)))
    return devices[:MAX_GPUS]


FAKE_DRIVER = "fake"
"""The driver a KERNELWIKI_FAKE_GPU record carries; such a record is never a measurement."""


def is_fake(environment: dict | None) -> bool:
    """Whether a record made under KERNELWIKI_FAKE_GPU must be refused as a measurement here.

    Such a record (driver 'fake') counts only in a process that itself runs under
    KERNELWIKI_FAKE_GPU — the runner's tests. Anywhere else (CI, `refresh --check`, `validate`) it is
    not a run: refresh makes no measured claim from it and validate rejects a claim that cites it.
    """
    return isinstance(environment, dict) and environment.get("driver") == FAKE_DRIVER \
        and not os.environ.get("KERNELWIKI_FAKE_GPU")


def short_gpu_name(name: str | None) -> str:
    """'NVIDIA H200' -> 'H200', 'NVIDIA H100 80GB HBM3' -> 'H100-80GB-HBM3'."""
    if not name:
        return "cpu"
    return re.sub(r"\s+", "-", name.replace("NVIDIA", "").strip())


def clocks(index: int | None = None) -> dict:
    """Current SM clock (MHz), power draw and power limit (W) of GPU `index` (default: the first);
    empty where nvidia-smi is absent."""
    which = ["-i", str(index)] if index is not None else []
    out = _run(["nvidia-smi", *which, "--query-gpu=clocks.sm,power.draw,power.limit,temperature.gpu",
                "--format=csv,noheader,nounits"])
    if not out:
        return {}
    values = [_number(v) for v in out.splitlines()[0].split(",")]
    return dict(zip(("sm_clock_mhz", "power_draw_w", "power_limit_w", "temperature_c"), values))


def fingerprint(repo_root: Path) -> dict:
    """The record's `environment`. Imports torch only if it is installed."""
    gpu = detect_gpu()
    env = {
        "gpu": gpu.name if gpu else None,
        "arch": gpu.arch if gpu else None,
        "driver": gpu.driver if gpu else None,
        "sm_count": None,
        "memory_gib": None,
        "l2_mib": None,
        "cuda_runtime": None,
        "nvcc": nvcc_version(),
        "torch": _version("torch"),
        "cutlass_dsl": _version("nvidia-cutlass-dsl"),
        "flash_attn_4": _version("flash-attn-4"),
        "quack": _version("quack-kernels"),
        "python": platform.python_version(),
        "commit": os.environ.get("KERNELWIKI_COMMIT") or _run(["git", "-C", str(repo_root), "rev-parse", "--short=12", "HEAD"]),
    }
    if gpu and env["torch"]:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env.update(sm_count=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1),
                       l2_mib=round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None,
                       cuda_runtime=torch.version.cuda)
    before = clocks()
    env["power_limit_w"] = before.get("power_limit_w")
    return env


CUBLAS_DISTRIBUTIONS = ("nvidia-cublas", "nvidia-cublas-cu13", "nvidia-cublas-cu12")
"""The wheels that ship the cuBLAS torch loads (CUDA 13 wheels drop the -cuXX suffix)."""


def library_versions() -> dict:
    """The CUDA runtime, cuBLAS and cuDNN versions the baselines run on (a timing protocol names
    them: a library upgrade changes what a cuBLAS ratio means). None where unknown or without torch."""
    cublas = next((v for v in map(_version, CUBLAS_DISTRIBUTIONS) if v), None)
    try:
        import torch
    except ImportError:
        return {"cuda": None, "cublas": cublas, "cudnn": None}
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"cuda": torch.version.cuda, "cublas": cublas, "cudnn": cudnn}


def nvcc_version() -> str | None:
    out = _run([shutil.which("nvcc") or "nvcc", "--version"])
    match = re.search(r"release (\d+\.\d+)", out or "")
    return match.group(1) if match else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def _run(argv: list[str]) -> str | None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None
