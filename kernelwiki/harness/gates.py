"""The correctness gate: one tolerance table, poisoned outputs, NaN never passes.

Two tests, both must pass, against an FP32 (or FP64) reference computed on the GPU:

- the relative Frobenius error ||out - ref|| / ||ref|| is at most the tolerance;
- the largest single-element error is at most the element tolerance. The Frobenius norm alone
  would forgive one corrupted element in a large output; this catches it.

Where the tolerance comes from:

- By default, from the table: TOLERANCES[dtype] and ELEMENT_TOLERANCES[dtype] x RMS(ref). These
  sit a few times above what a correct kernel of that precision produces (tf32 ~3e-4, bf16
  operands 1e-3..1e-2) and far below what a wrong kernel produces (a skipped K tile or a dropped
  scale gives errors of order 1e-1..1). They are loose by design: one number per dtype must cover
  every shape and input distribution.
- Derived from the reference's own error, where the table is too loose to mean anything: compute
  the same product with a same-precision library call (torch.matmul in TF32, a dequantized FP8
  product in FP32, ...) and pass `**reference_tolerance(that, ref)` to `check`. The gate then
  allows DERIVED_FACTOR times the error that computation has against the higher-precision
  reference. Example: TF32 inputs already masked to TF32 against an FP64 reference show ~1e-5,
  while the tf32 table entry allows 2e-3 — a kernel that rounded its result to bf16 (~1e-3)
  would pass the table and fails the derived gate.

"exact" (data movement) must match bit for bit. An all-zero reference allows no error at all.
`check` accepts torch tensors (computed on their device) or numpy arrays.

Beside `check`, for what a probe needs in addition (each returns a mapping with `passed`):

- `bit_exact(out, other, against)`: how many elements differ from another implementation's output
  (where earlier runs found them identical, any difference is a change of arithmetic);
- `check_lse(lse, ref_lse, tol)`: an attention kernel's log-sum-exp, finite entries within `tol`
  (natural-log units) and infinite ones (rows with nothing to attend) equal;
- `check_relative_elements(out, ref, tol)`: every element's own relative error, for functions
  whose values span many binades (exp2), where a norm only sees the largest;
- `combine({name: result, ...})`: several of these as one correctness mapping.
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

DERIVED_FACTOR = 4.0
"""A correct kernel's error differs from the library's by its accumulation order, a small factor;
a kernel that drops precision somewhere is off by orders of magnitude."""
DERIVED_FLOOR = 1e-7
"""Relative floor of a derived tolerance (about FP32 rounding), for when the library's result equals
the reference exactly."""


def tolerance(dtype: str) -> float:
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise ValueError(f"no tolerance for dtype {dtype!r}; known: {', '.join(TOLERANCES)}") from None


def poison(tensor: Any) -> Any:
    """Fill an output with NaN before the kernel runs, so unwritten elements cannot pass."""
    return tensor.fill_(float("nan")) if tensor.is_floating_point() else tensor.fill_(-1)


def untouched(tensor: Any) -> bool:
    """Whether every element still holds `poison`'s value: a region the kernel must skip (padding
    rows, tiles past a group's count) was not written."""
    ops = _Ops(tensor)
    floating = tensor.is_floating_point() if ops.torch else ops.lib.issubdtype(tensor.dtype, ops.lib.floating)
    return bool(ops.lib.isnan(tensor).all()) if floating else bool((tensor == -1).all())


class _Ops:
    """The handful of array operations the gate needs, for torch tensors or numpy arrays."""

    def __init__(self, like: Any):
        self.torch = type(like).__module__.startswith("torch")
        if self.torch:
            import torch

            self.lib = torch
        else:
            import numpy

            self.lib = numpy

    def f64(self, x: Any) -> Any:
        return x.detach().to(self.lib.float64) if self.torch else self.lib.asarray(x, dtype=self.lib.float64)

    def count_nan(self, x: Any) -> int:
        return int(self.lib.isnan(x).sum().item())

    def equal(self, a: Any, b: Any) -> bool:
        return bool(self.lib.equal(a, b)) if self.torch else bool(self.lib.array_equal(a, b))

    def norm(self, x: Any) -> float:
        return float(self.lib.linalg.vector_norm(x).item()) if self.torch else float(self.lib.linalg.norm(x.ravel()))

    def max_abs(self, x: Any) -> float:
        return float(self.lib.abs(x).max().item()) if self.numel(x) else 0.0

    def numel(self, x: Any) -> int:
        return int(x.numel()) if self.torch else int(x.size)


def reference_tolerance(same_precision: Any, ref: Any, k: float = DERIVED_FACTOR,
                        floor: float = DERIVED_FLOOR) -> dict:
    """Tolerances for `check(out, ref, dtype, **reference_tolerance(lib_out, ref))`: k times the
    relative and the largest element error of a same-precision computation against the reference."""
    ops = _Ops(ref)
    low, ref64 = ops.f64(same_precision), ops.f64(ref)
    if tuple(low.shape) != tuple(ref64.shape) or ops.count_nan(low):
        raise ValueError("the same-precision computation must have the reference's shape and no NaN")
    ref_norm = ops.norm(ref64)
    rms = ref_norm / max(1, ops.numel(ref64)) ** 0.5
    rel = ops.norm(low - ref64) / ref_norm if ref_norm > 0 else 0.0
    return {"tol": max(k * rel, floor), "max_abs_tol": max(k * ops.max_abs(low - ref64), floor * rms)}


def check(out: Any, ref: Any, dtype: str, tol: float | None = None, max_abs_tol: float | None = None) -> dict:
    """Compare a kernel's output with its reference. Returns the record's `correctness` mapping.

    `tol` / `max_abs_tol` replace the table's relative and absolute element tolerances (see
    `reference_tolerance`); `tolerance_basis` in the result says which were used.
    """
    table_tol = tolerance(dtype)
    ops = _Ops(out)
    basis = "table" if tol is None and max_abs_tol is None else "derived"
    tol = table_tol if tol is None else tol
    if tuple(out.shape) != tuple(ref.shape):
        return {"passed": False, "reason": f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}",
                "rel_err": None, "max_abs_err": None, "tolerance": tol, "tolerance_basis": basis,
                "all_written": False}
    out64, ref64 = ops.f64(out), ops.f64(ref)
    nan_count = ops.count_nan(out64)
    if ops.count_nan(ref64):
        return {"passed": False, "reason": "the reference contains NaN", "rel_err": None, "max_abs_err": None,
                "tolerance": tol, "tolerance_basis": basis, "all_written": nan_count == 0, "nan_count": nan_count}
    if table_tol == 0.0 and basis == "table":
        equal = ops.equal(out, ref)
        mismatched = int((out != ref).sum().item()) if not equal else 0
        return {"passed": equal and nan_count == 0, "rel_err": 0.0 if equal else None,
                "max_abs_err": None if nan_count else ops.max_abs(out64 - ref64),
                "mismatched": mismatched, "tolerance": 0.0, "tolerance_basis": basis, "all_written": nan_count == 0}
    diff = out64 - ref64
    ref_norm = ops.norm(ref64)
    err_norm = ops.norm(diff) if nan_count == 0 else float("nan")
    # An all-zero reference (zeros as inputs) has no relative error: use the absolute one.
    rel = err_norm / ref_norm if ref_norm > 0 else err_norm
    rms = ref_norm / max(1, ops.numel(ref64)) ** 0.5
    element_tol = ELEMENT_TOLERANCES[dtype] * rms if max_abs_tol is None else max_abs_tol
    max_abs = ops.max_abs(diff) if nan_count == 0 else None
    passed = nan_count == 0 and rel == rel and rel <= tol and max_abs is not None and max_abs <= element_tol
    return {"passed": passed, "rel_err": rel if rel == rel else None, "max_abs_err": max_abs,
            "tolerance": tol, "max_abs_tolerance": element_tol, "tolerance_basis": basis,
            "all_written": nan_count == 0, "nan_count": nan_count}


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in FP64 (the absolute error for an all-zero reference); NaN if out has NaN."""
    ops = _Ops(out)
    out64, ref64 = ops.f64(out), ops.f64(ref)
    ref_norm = ops.norm(ref64)
    err = ops.norm(out64 - ref64)
    return err / ref_norm if ref_norm > 0 else err


def bit_exact(out: Any, other: Any, against: str, allowed: int = 0) -> dict:
    """The count of elements of `out` that differ from `other` (another implementation's output,
    named `against`); passes with at most `allowed`. NaN differs from everything."""
    if tuple(out.shape) != tuple(other.shape):
        return {"against": against, "passed": False, "differing": None, "allowed": allowed,
                "reason": f"shape {tuple(out.shape)} != {against} {tuple(other.shape)}"}
    differing = int((out != other).sum())
    return {"against": against, "differing": differing, "allowed": allowed, "passed": differing <= allowed}


def check_lse(lse: Any, ref_lse: Any, tol: float) -> dict:
    """An attention kernel's log-sum-exp against the reference: NaN never passes, finite entries
    within `tol` (natural-log units: exp(tol) - 1 is the relative error of the softmax denominator),
    infinite entries (a row with nothing to attend) identical to the reference's."""
    ops = _Ops(lse)
    if tuple(lse.shape) != tuple(ref_lse.shape):
        return {"passed": False, "reason": f"shape {tuple(lse.shape)} != reference {tuple(ref_lse.shape)}",
                "max_abs_err": None, "tolerance": tol, "all_written": False}
    got, ref = ops.f64(lse), ops.f64(ref_lse)
    nan_count = ops.count_nan(got)
    finite = ops.lib.isfinite(ref)
    err = ops.max_abs(got[finite] - ref[finite]) if nan_count == 0 else None
    infinite_match = ops.equal(got[~finite], ref[~finite])
    passed = nan_count == 0 and err is not None and err <= tol and infinite_match and not ops.count_nan(ref)
    return {"passed": passed, "max_abs_err": err, "tolerance": tol, "infinite_entries_match": infinite_match,
            "all_written": nan_count == 0, "nan_count": nan_count}


def check_relative_elements(out: Any, ref: Any, tol: float, where: Any = None) -> dict:
    """Every element's |out - ref| / |ref| at most `tol` (over the elements `where` selects, e.g.
    the normal results of a flush-to-zero function); NaN never passes."""
    ops = _Ops(out)
    got, exact = ops.f64(out), ops.f64(ref)
    nan_count = ops.count_nan(got)
    if where is not None:
        got, exact = got[where], exact[where]
    if ops.numel(exact) == 0 or (ops.lib.abs(exact) == 0).any():
        return {"passed": False, "reason": "no elements selected, or a zero reference element (relative error undefined)",
                "rel_err": None, "tolerance": tol, "all_written": nan_count == 0, "nan_count": nan_count}
    worst = ops.max_abs((got - exact) / exact) if nan_count == 0 else None
    return {"passed": worst is not None and worst <= tol, "rel_err": worst, "tolerance": tol,
            "tolerance_basis": "elementwise relative", "all_written": nan_count == 0, "nan_count": nan_count}


def combine(parts: dict[str, dict]) -> dict:
    """Several gate results as one correctness mapping: it passes when every part passes and every
    part's output was written; `rel_err`, `max_abs_err` and `tolerance` are the first part's (list
    the primary output first); the parts are kept under their names."""
    if not parts:
        raise ValueError("combine needs at least one gate result")
    first = next(iter(parts.values()))
    return {"passed": all(bool(p.get("passed")) for p in parts.values()),
            "rel_err": first.get("rel_err"), "max_abs_err": first.get("max_abs_err"),
            "tolerance": first.get("tolerance"),
            "all_written": all(p.get("all_written", True) for p in parts.values()), "parts": parts}


CONTROL_BLUNT_FACTOR = 10.0
"""A negative control must fail a gate by at most this factor: a control whose error is 100x the
tolerance would also fail a gate ten times looser, so it shows the gate catches gross bugs but says
nothing about whether the tolerance is tight enough to catch the subtle ones."""
CONTROL_NEAR_FACTOR = 1.5
"""... and by at least this factor: a control that fails by less sits where run-to-run noise could
let it through, and one that passes a test shows nothing about that test."""

_NOT_PARTS = ("parts",)


def gate_ratios(correctness: Any, prefix: str = "") -> dict[str, float]:
    """Each numeric test of a gate result -> its error over that test's tolerance:
    `<part>.rel` (`check`'s relative Frobenius error, `check_relative_elements`' worst element),
    `<part>.max_abs` (`check`'s largest element error over its element tolerance), `<part>.abs`
    (`check_lse`'s largest error). The parts of `combine` (and gate results nested under their own
    name, as a probe with two gates returns them) are visited under their names; `combine`'s
    top-level copy of its first part is not counted twice. Exact gates (tolerance 0, bit-exact
    counts) and outputs with NaN have no finite ratio and are left out: any mismatch is the smallest
    possible failure, and the poison test caught the NaN."""
    out: dict[str, float] = {}
    if not isinstance(correctness, dict):
        return out
    parts = correctness.get("parts") if isinstance(correctness.get("parts"), dict) else None
    nested = {k: v for k, v in correctness.items()
              if k not in _NOT_PARTS and isinstance(v, dict) and "passed" in v}
    if parts is None:
        error, tol = correctness.get("rel_err"), correctness.get("tolerance")
        abs_err, abs_tol = correctness.get("max_abs_err"), correctness.get("max_abs_tolerance")
        if _finite(error) and _finite(tol) and tol > 0:
            out[prefix + "rel"] = float(error) / float(tol)
        if _finite(abs_err) and _finite(abs_tol) and abs_tol > 0:
            out[prefix + "max_abs"] = float(abs_err) / float(abs_tol)
        elif "rel_err" not in correctness and _finite(abs_err) and _finite(tol) and tol > 0:
            out[prefix + "abs"] = float(abs_err) / float(tol)   # check_lse: one absolute tolerance
    for name, part in {**nested, **(parts or {})}.items():
        out.update(gate_ratios(part, f"{prefix}{name}."))
    return out


def control_reach(controls: list[dict]) -> list[str]:
    """What the negative controls leave unproven: for each gate test any control was judged by
    (`gate_ratios` of its correctness), at least one control must fail it at CONTROL_NEAR_FACTOR to
    CONTROL_BLUNT_FACTOR times its tolerance. Returns one line per test that none does, naming each
    control's ratio (`rel: control 0.09x`), or [] when every test is within reach."""
    seen: dict[str, list[tuple[str, float]]] = {}
    for entry in controls:
        if not isinstance(entry, dict):
            continue
        for key, ratio in gate_ratios(entry.get("correctness")).items():
            seen.setdefault(key, []).append((str(entry.get("name") or "control"), ratio))
    problems = []
    for key, ratios in seen.items():
        if not any(CONTROL_NEAR_FACTOR <= r <= CONTROL_BLUNT_FACTOR for _, r in ratios):
            problems.append(f"{key}: " + ", ".join(f"{name} {r:.3g}x" for name, r in ratios))
    return problems


def error_over_gate(correctness: dict) -> float | None:
    """A control's relative error over the tolerance it was gated with (`check`'s rel_err /
    tolerance; over `combine`'s parts, the largest): a relative-error gate that many times looser
    would still fail this output. Kept beside `gate_ratios` (every test, the element and lse ones
    included), which is what the runner judges a control by. None where no finite ratio exists (an
    exact gate, an output with NaN: the poison test, not the tolerance, caught it)."""
    ratios: list[float] = []

    def visit(result: Any) -> None:
        if not isinstance(result, dict):
            return
        error, tol = result.get("rel_err"), result.get("tolerance")
        if _finite(error) and _finite(tol) and tol > 0:
            ratios.append(float(error) / float(tol))
        for part in (result.get("parts") or {}).values():
            visit(part)

    visit(correctness)
    return max(ratios) if ratios else None


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))
