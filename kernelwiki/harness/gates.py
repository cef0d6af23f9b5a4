"""The correctness gate: one tolerance table, poisoned outputs, NaN never passes.

Two tests, both must pass, against an FP32 (or FP64) reference computed on the GPU:

- the relative Frobenius error ||out - ref|| / ||ref|| is at most TOLERANCES[dtype]. These sit a few
  times above what a correct kernel of that precision produces (tf32 ~3e-4, bf16 operands
  1e-3..1e-2) and far below what a wrong kernel produces (a skipped K tile or a dropped scale gives
  errors of order 1e-1..1);
- the largest single-element error is at most ELEMENT_TOLERANCES[dtype] x RMS(ref). The Frobenius
  norm alone would forgive one corrupted element in a large output; this catches it.

An all-zero reference (zeros as inputs) allows no error at all.
"""

from __future__ import annotations

from typing import Any

# dtype of the inputs -> allowed relative Frobenius error. "exact" data movement must match bit for bit.
TOLERANCES: dict[str, float] = {
    "exact": 0.0,
    "fp64": 1e-12,
    "fp32": 1e-5,
    "tf32": 2e-3,
    "fp16": 5e-3,
    "bf16": 2e-2,
    "e4m3": 6e-2,
    "e5m2": 1.2e-1,
    "nvfp4": 2.5e-1,
}


# dtype -> allowed max |out - ref|, as a multiple of the reference's root-mean-square value.
ELEMENT_TOLERANCES: dict[str, float] = {
    "exact": 0.0,
    "fp64": 1e-9,
    "fp32": 1e-4,
    "tf32": 2e-2,
    "fp16": 2e-2,
    "bf16": 1e-1,
    "e4m3": 5e-1,
    "e5m2": 1.0,
    "nvfp4": 2.0,
}


def tolerance(dtype: str) -> float:
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"no tolerance for dtype {dtype!r}; known: {', '.join(TOLERANCES)}") from None


def poison(tensor: Any) -> Any:
    """Fill an output with NaN before the kernel runs, so unwritten elements cannot pass."""
    return tensor.fill_(float("nan")) if tensor.is_floating_point() else tensor.fill_(-1)


def check(out: Any, ref: Any, dtype: str) -> dict:
    """Compare a kernel's output with its reference. Returns the record's `correctness` mapping."""
    import torch

    tol = tolerance(dtype)
    out64, ref64 = out.detach().to(torch.float64), ref.detach().to(torch.float64)
    nan_count = int(torch.isnan(out64).sum().item())
    if out.shape != ref.shape:
        return {"passed": False, "reason": f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
                "rel_err": None, "max_abs_err": None, "tolerance": tol, "all_written": False}
    if tol == 0.0:
        equal = bool(torch.equal(out, ref))
        mismatched = int((out != ref).sum().item()) if not equal else 0
        return {"passed": equal and nan_count == 0, "rel_err": 0.0 if equal else None,
                "max_abs_err": None if nan_count else float((out64 - ref64).abs().max().item()),
                "mismatched": mismatched, "tolerance": tol, "all_written": nan_count == 0}
    diff = out64 - ref64
    ref_norm = float(torch.linalg.vector_norm(ref64).item())
    err_norm = float(torch.linalg.vector_norm(diff).item())
    # An all-zero reference (zeros as inputs) has no relative error: use the absolute one.
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    rms = ref_norm / max(1, ref64.numel()) ** 0.5
    max_abs_tol = ELEMENT_TOLERANCES[dtype] * rms
    max_abs = float(diff.abs().max().item()) if nan_count == 0 else None
    passed = nan_count == 0 and rel == rel and rel <= tol and max_abs is not None and max_abs <= max_abs_tol
    return {"passed": passed, "rel_err": rel if rel == rel else None, "max_abs_err": max_abs,
            "tolerance": tol, "max_abs_tolerance": max_abs_tol, "all_written": nan_count == 0,
            "nan_count": nan_count}
