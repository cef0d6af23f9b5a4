"""DeepGEMM (the upstream kernel our block-scaled GEMM is modelled on) as a timing baseline.

The GPU machine's bundle (`source .device/deepgemm.sh`) puts DeepGEMM 340d988 on PYTHONPATH; it is
JIT-compiled with nvcc per shape class on first use (10-20 s each), so `precompile` builds every
configuration the selected cases need in parallel threads before anything is timed. It takes our
tensors as they are: quantize.py's sfa is already DeepGEMM's TMA-aligned, M-major layout, so its
wrapper launches no transposition kernel. The probe times every candidate as a CUDA-graph replay,
so the wrapper's Python work (checks, config lookup, ctypes) is not timed: the replay launches the
very kernel the wrapper would.

When `deep_gemm` cannot be imported, or refuses a shape (its normal layout needs N % 64 == 0), the
candidate is skipped and the reason goes into the record.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

NAME = "DeepGEMM"
_STATE: dict = {}


def module():
    """(deep_gemm, None) or (None, why it is unavailable)."""
    if "module" not in _STATE:
        try:
            import deep_gemm
            _STATE["module"] = (deep_gemm, None)
        except Exception as err:   # ImportError, or its JIT finding no nvcc
            _STATE["module"] = (None, f"deep_gemm not importable here ({type(err).__name__}: {err})"[:300])
    return _STATE["module"]


def provenance() -> dict:
    """Revision and the FFMA-interleave note for the record (empty when DeepGEMM is unavailable)."""
    deep_gemm, _ = module()
    if deep_gemm is None:
        return {}
    revision_file = Path(deep_gemm.__file__).resolve().parents[1] / "REVISION"
    revision = revision_file.read_text().strip() if revision_file.is_file() else "unknown (no REVISION file)"
    try:
        from deep_gemm.jit.compiler import get_nvcc_compiler

        nvcc = get_nvcc_compiler()[1]
    except Exception as err:
        nvcc = f"unknown ({type(err).__name__})"
    # DeepGEMM rewrites the SASS of its promotion FFMAs only for nvcc <= 12.8 (jit/compiler.py)
    ffma = (f"FFMA-interleave SASS pass off: nvcc {nvcc} > 12.8 (DeepGEMM runs it only for nvcc <= 12.8)"
            if nvcc > "12.8" else f"FFMA-interleave SASS pass on (nvcc {nvcc})")
    return {"revision": revision, "note": ffma}


def normal(a, sfa, b, sfb) -> tuple[Callable[[], object] | None, object]:
    """(launch, out) for D = A B^T, or (None, the reason it is refused)."""
    import torch

    deep_gemm, reason = module()
    if deep_gemm is None:
        return None, reason
    if b.shape[0] % 64:
        return None, f"DeepGEMM 340d988 needs N % 64 == 0 (gemm_fp8_fp8_bf16_nt); N = {b.shape[0]}"
    out = torch.empty(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
    return (lambda: deep_gemm.gemm_fp8_fp8_bf16_nt((a, sfa), (b, sfb), out)), out


def contiguous(a, sfa, b, sfb, m_indices) -> tuple[Callable[[], object] | None, object]:
    import torch

    deep_gemm, reason = module()
    if deep_gemm is None:
        return None, reason
    if bool((m_indices < 0).any()):
        # its scheduler reads each 128-row block's group from m_indices and has no skip for -1
        return None, "DeepGEMM 340d988's contiguous layout has no padding rows (m_indices == -1)"
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)
    return (lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous((a, sfa), (b, sfb), out, m_indices)), out


def masked(a, sfa, b, sfb, masked_m, expected_m: int) -> tuple[Callable[[], object] | None, object]:
    import torch

    deep_gemm, reason = module()
    if deep_gemm is None:
        return None, reason
    out = torch.empty(*a.shape[:2], b.shape[1], dtype=torch.bfloat16, device=a.device)
    return (lambda: deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((a, sfa), (b, sfb), out, masked_m,
                                                                       expected_m)), out


def precompile(shapes: list[dict]) -> dict:
    """JIT-build (and launch once) every DeepGEMM configuration these cases need, in parallel:
    nvcc runs as a subprocess, so threads overlap the compiles. shapes: {layout, m, n, k, groups}
    (m: rows per group for masked, all rows for contiguous). Returns {"seconds", "errors"}."""
    import time

    import torch

    deep_gemm, reason = module()
    if deep_gemm is None or not shapes:
        return {"seconds": 0.0, "errors": [reason] if reason else []}

    def build(shape: dict) -> str | None:
        from artifacts.kernels.fp8_blockscale_gemm import quantize

        layout, m, n, k, groups = shape["layout"], shape["m"], shape["n"], shape["k"], shape["groups"]
        empty = lambda *size: torch.zeros(*size, device="cuda").to(torch.float8_e4m3fn)  # noqa: E731
        try:
            if layout == "normal":
                _, sfa = quantize.per_token_cast(torch.ones(m, k, device="cuda"))
                _, sfb = quantize.per_block_cast(torch.ones(n, k, device="cuda"))
                launch, _ = normal(empty(m, k), sfa, empty(n, k), sfb)
            elif layout == "contiguous":
                _, sfa = quantize.per_token_cast(torch.ones(m, k, device="cuda"))
                _, sfb = quantize.per_block_cast(torch.ones(groups, n, k, device="cuda"))
                m_indices = torch.arange(m, device="cuda", dtype=torch.int32) * groups // m
                launch, _ = contiguous(empty(m, k), sfa, empty(groups, n, k), sfb, m_indices)
            else:
                _, sfa = quantize.per_token_cast(torch.ones(groups, m, k, device="cuda"))
                _, sfb = quantize.per_block_cast(torch.ones(groups, n, k, device="cuda"))
                counts = torch.full((groups,), m, dtype=torch.int32, device="cuda")
                launch, _ = masked(empty(groups, m, k), sfa, empty(groups, n, k), sfb, counts, m)
            if launch is not None:
                launch()
                torch.cuda.synchronize()
            return None
        except Exception as err:
            return f"{shape}: {type(err).__name__}: {err}"[:300]

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1))) as pool:
        errors = [e for e in pool.map(build, shapes) if e]
    return {"seconds": round(time.perf_counter() - started, 1), "errors": errors}
