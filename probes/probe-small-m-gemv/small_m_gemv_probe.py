"""probe-small-m-gemv: at M <= 16, does a plain FMA (bf16) or dp4a (int8) kernel beat the tensor cores?

Every case: (1) correctness of our kernel (and of each baseline) on normal inputs - bf16 against a
float64 reference with the gate derived from cuBLAS's own error at the same shape, int8 exactly;
(2) ctx.bench of our kernel, cuBLAS and (bf16) our Hopper GEMM on the same rotated input sets; the
headline is the problem's compulsory bytes (w once, x, y) per second, against the faster
tensor-core baseline, with the fraction of the measured copy ceiling.

Run through the runner: kernelwiki probe run --probe probe-small-m-gemv [--compile-only]
"""

from __future__ import annotations

from functools import lru_cache

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.small_m_gemv import gemv

INT_MM_MIN_ROWS = 32   # torch._int_mm (cuBLAS int8) refuses M <= 16; x is padded to this many rows


@lru_cache(maxsize=1)
def _kernels() -> gemv.Gemv:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context exists before the library's runtime starts
    return gemv.Gemv(compile_mod.nvcc_library(gemv.SOURCE, "sm_90a"))


def compulsory_bytes(dtype: str, m: int, n: int, k: int) -> int:
    """What the problem must move at least: w once, x once, y once."""
    element = 2 if dtype == "bf16" else 1
    out = 2 if dtype == "bf16" else 4
    return n * k * element + m * k * element + m * n * out


def operands(dtype: str, m: int, n: int, k: int, generator):
    """Normal inputs: bf16 as drawn, int8 as round(32 z) clipped to [-127, 127]."""
    import torch

    x = torch.randn(m, k, generator=generator, device="cuda")
    w = torch.randn(n, k, generator=generator, device="cuda")
    if dtype == "bf16":
        return x.bfloat16(), w.bfloat16()
    return ((t * 32).round().clamp(-127, 127).to(torch.int8) for t in (x, w))


def _int_mm_padded(x, w, out_padded, x_padded):
    """cuBLAS int8 at M <= 16: x copied into a 32-row buffer (rows past M stay zero), then _int_mm."""
    import torch

    x_padded[: x.shape[0]].copy_(x)
    torch._int_mm(x_padded, w.t(), out=out_padded)


def _gate_bf16(x, w) -> tuple:
    """The float64 reference and the gate tolerances derived from cuBLAS's error at this shape."""
    import torch

    ref = gemv.reference(x, w)
    return ref, gates.reference_tolerance(torch.matmul(x, w.t()), ref)


def check(dtype: str, x, w, *, skip_chunks: int = 0) -> dict:
    import torch

    kernels = _kernels()
    m, n = x.shape[0], w.shape[0]
    y = gates.poison(torch.empty(m, n, dtype=torch.bfloat16 if dtype == "bf16" else torch.int32, device="cuda"))
    kernels(x, w, y, stream=torch.cuda.current_stream().cuda_stream, skip_chunks=skip_chunks)
    torch.cuda.synchronize()
    if dtype == "s8":
        return gates.check(y, gemv.reference(x, w).to(torch.int32), "exact")
    ref, tolerance = _gate_bf16(x, w)
    return gates.check(y, ref, "bf16", **tolerance)


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    p = case["params"]
    dtype, m, n, k = p["dtype"], int(p["m"]), int(p["n"]), int(p["k"])
    gemv.can_implement(dtype, m, n, k)
    kernels = _kernels()
    x, w = operands(dtype, m, n, k, ctx.generator())
    correctness = check(dtype, x, w)
    baselines_correct = {}

    if dtype == "bf16":
        from artifacts.kernels.hopper_gemm import hopper_gemm  # CuTe DSL: compile-only needs no cutlass

        ref, tolerance = _gate_bf16(x, w)
        run, d = hopper_gemm.compile_gemm(x, w)
        gates.poison(d)
        run()
        baselines_correct["hopper_gemm"] = gates.check(d, ref, "bf16", **tolerance)
    else:
        out_padded = torch.empty(INT_MM_MIN_ROWS, n, dtype=torch.int32, device="cuda")
        x_padded = torch.zeros(INT_MM_MIN_ROWS, k, dtype=torch.int8, device="cuda")
        gates.poison(out_padded)
        _int_mm_padded(x, w, out_padded, x_padded)
        baselines_correct["int_mm_padded"] = gates.check(out_padded[:m], gemv.reference(x, w).to(torch.int32),
                                                         "exact")
    correctness["baselines"] = baselines_correct
    correctness["passed"] = correctness["passed"] and all(c["passed"] for c in baselines_correct.values())

    def make_inputs(i: int) -> dict:
        """Input set i: fresh operands and every candidate's output (and the Hopper GEMM bound to them)."""
        xs, ws = operands(dtype, m, n, k, ctx.generator(salt=1 + i))
        out_type = torch.bfloat16 if dtype == "bf16" else torch.int32
        s = {"x": xs, "w": ws, "y": torch.empty(m, n, dtype=out_type, device="cuda")}
        if dtype == "bf16":
            s["y_cublas"] = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            s["hopper"], _ = hopper_gemm.compile_gemm(xs, ws)
        else:
            s["x_padded"] = torch.zeros(INT_MM_MIN_ROWS, k, dtype=torch.int8, device="cuda")
            s["y_padded"] = torch.empty(INT_MM_MIN_ROWS, n, dtype=torch.int32, device="cuda")
        return s

    def ours(s: dict) -> None:
        kernels(s["x"], s["w"], s["y"], stream=torch.cuda.current_stream().cuda_stream)

    candidates = {"cuda_cores": ours}
    if dtype == "bf16":
        candidates["cublas"] = lambda s: torch.matmul(s["x"], s["w"].t(), out=s["y_cublas"])
        candidates["hopper_gemm"] = lambda s: s["hopper"]()
    else:
        candidates["cublas_int_mm_padded"] = lambda s: _int_mm_padded(s["x"], s["w"], s["y_padded"], s["x_padded"])
    moved = compulsory_bytes(dtype, m, n, k)
    # one set also holds the baselines' outputs (and for int8 the padded x)
    set_bytes = moved + (2 * (2 * m * n) if dtype == "bf16" else INT_MM_MIN_ROWS * (k + 4 * n))
    timing = ctx.bench(candidates, make_inputs, set_bytes)

    tbs = {name: moved / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    copy = ctx.ceilings.get("copy")
    metrics = {"compulsory_bytes": moved}
    for name, t in timing.items():
        metrics[f"{name}_us"] = round(t["median_ms"] * 1e3, 2)
        metrics[f"{name}_tb_s"] = round(tbs[name], 3)
        if copy:
            metrics[f"{name}_fraction_of_copy"] = round(tbs[name] / float(copy), 4)
    baselines = [name for name in candidates if name != "cuda_cores"]
    strongest = max(baselines, key=lambda name: tbs[name])
    metrics["strongest_baseline"] = strongest
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            **ctx.headline_against("bandwidth", tbs["cuda_cores"], "TB/s", {name: tbs[name] for name in baselines},
                                   correct={name: bool(c["passed"]) for name, c in correctness["baselines"].items()
                                            if name in baselines},
                                   peak_key="copy", ceiling_key="copy")}


def negative_control(ctx: Context) -> dict:
    """The K loop one 256-element chunk short at M=4, N=4096, K=131072: 1/512 of K never read,
    about 7x the derived relative and 4x the element tolerance (at K=28672, 1/112 of K missed the
    relative tolerance by 14x: a gate ten times looser would still have caught it)."""
    x, w = operands("bf16", 4, 4096, 131072, ctx.generator(salt=99))
    return check("bf16", x, w, skip_chunks=1)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(gemv.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
