"""probe-triton-hopper: what Triton's tl.dot becomes on sm_90a, and a persistent Triton matmul against cuBLAS and ours.

Every case (C = A @ W^T in bf16, FP32 accumulation):
  1. launches each variant of our persistent Triton matmul (artifacts/kernels/triton_matmul) - pointer
     loads, TMA descriptors, TMA descriptors with a warp-specialized tile loop, and a second block
     shape - on poisoned outputs and gates it (and cuBLAS and our CuTe DSL Hopper GEMM) against a
     float64 reference with the tolerance derived from cuBLAS's own error; a variant this Triton
     refuses is recorded as "unsupported: <the error>";
  2. scans each compiled variant's PTX and TTGIR (kernel.asm) for what tl.dot and the loads lowered
     to: wgmma.mma_async, cp.async.bulk.tensor (TMA), cp.async (Ampere-style copies), setmaxnreg
     (register reallocation between specialized warps), mbarrier waits;
  3. times every correct candidate with ctx.bench. The headline is the fastest Triton variant in
     TFLOP/s against the faster of cuBLAS and our Hopper GEMM.
Compile-only mode (on a machine with Triton and a GPU) compiles the variants with Triton's warmup
and scans their PTX; without Triton the runner skips it (compile_requires).

Run through the runner: kernelwiki probe run --probe probe-triton-hopper
"""

from __future__ import annotations

import re

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

VARIANTS = {
    "triton pointers 128x256x64 w8 s3": dict(loads="pointers", block_m=128, block_n=256, num_warps=8, num_stages=3),
    "triton TMA 128x256x64 w8 s3": dict(loads="descriptors", block_m=128, block_n=256, num_warps=8, num_stages=3),
    "triton TMA + warp_specialize 128x256x64 w8 s3": dict(loads="descriptors", warp_specialize=True, block_m=128,
                                                          block_n=256, num_warps=8, num_stages=3),
    "triton TMA 128x128x64 w4 s4": dict(loads="descriptors", block_m=128, block_n=128, num_warps=4, num_stages=4),
}
PTX_PATTERNS = {"wgmma.mma_async": r"wgmma\.mma_async", "cp.async.bulk.tensor": r"cp\.async\.bulk\.tensor",
                "cp.async (non-bulk)": r"cp\.async\.c[ag]\.", "setmaxnreg": r"setmaxnreg",
                "mbarrier.try_wait": r"mbarrier\.try_wait", "mma.sync": r"\bmma\.sync"}
TTGIR_PATTERNS = {"warp_group_dot": r"ttng\.warp_group_dot", "tma load": r"async_tma_copy_global_to_local|tma_load",
                  "warp_specialize": r"ttg\.warp_specialize"}


def lowering(compiled) -> dict:
    """{pattern: count} in a compiled Triton kernel's PTX and TTGIR."""
    asm = getattr(compiled, "asm", {}) or {}
    ptx, ttgir = asm.get("ptx", "") or "", asm.get("ttgir", "") or ""
    counts = {name: len(re.findall(pattern, ptx)) for name, pattern in PTX_PATTERNS.items()}
    counts.update({f"ttgir {name}": len(re.findall(pattern, ttgir)) for name, pattern in TTGIR_PATTERNS.items()})
    return counts


def _operands(m: int, n: int, k: int, generator):
    import torch

    return (torch.randn(m, k, generator=generator, device="cuda").bfloat16(),
            torch.randn(n, k, generator=generator, device="cuda").bfloat16())


def _unsupported(err: BaseException) -> str:
    return f"unsupported: {type(err).__name__}: {' '.join(str(err).split())[:300]}"


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    from artifacts.kernels.hopper_gemm import hopper_gemm
    from artifacts.kernels.triton_matmul import persistent_matmul as ours

    p = case["params"]
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    a, w = _operands(m, n, k, ctx.generator())
    ref = a.double() @ w.double().t()
    c_cublas = gates.poison(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    torch.matmul(a, w.t(), out=c_cublas)
    tolerance = gates.reference_tolerance(c_cublas, ref)
    parts = {"cublas": gates.check(c_cublas, ref, "bf16", **tolerance)}
    run_ours, d_ours = hopper_gemm.compile_gemm(a, w)
    gates.poison(d_ours)
    run_ours()
    torch.cuda.synchronize()
    parts["hopper_gemm"] = gates.check(d_ours, ref, "bf16", **tolerance)
    support, lowered, working = {}, {}, []
    for name, settings in VARIANTS.items():
        c = gates.poison(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        try:
            compiled = ours.launcher(a, w, c, **settings)()
            torch.cuda.synchronize()
        except Exception as err:  # a refusal is a result: this Triton cannot build the variant
            support[name] = _unsupported(err)
            continue
        lowered[name] = lowering(compiled)
        parts[name] = gates.check(c, ref, "bf16", **tolerance)
        support[name] = "supported" if parts[name]["passed"] else "accepted, incorrect"
        working.append(name)
    del ref
    correctness = gates.combine(parts)
    correctness["support"] = support

    def make_inputs(i: int) -> dict:
        xs, ws = (a, w) if i == 0 else _operands(m, n, k, ctx.generator(salt=1 + i))
        s = {"a": xs, "w": ws, "c": torch.empty(m, n, dtype=torch.bfloat16, device="cuda")}
        s["hopper_gemm"], _ = hopper_gemm.compile_gemm(xs, ws)
        for name in working:
            s[name] = ours.launcher(xs, ws, torch.empty(m, n, dtype=torch.bfloat16, device="cuda"), **VARIANTS[name])
        return s

    candidates = {"cublas": lambda s: torch.matmul(s["a"], s["w"].t(), out=s["c"]),
                  "hopper_gemm": lambda s: s["hopper_gemm"]()}
    candidates.update({name: (lambda s, name=name: s[name]()) for name in working if parts[name]["passed"]})
    timing = ctx.bench(candidates, make_inputs, 2 * (m * k + n * k + m * n))
    tflops = {name: 2 * m * n * k / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    metrics = {"support": support, "lowering": lowered, "triton": _triton_version(),
               **{f"{name} TFLOP/s": round(v, 1) for name, v in tflops.items()}}
    tritons = [name for name in tflops if name.startswith("triton")]
    if not tritons:
        return {"correctness": correctness, "timing": timing, "metrics": metrics}
    best = max(tritons, key=tflops.get)
    strongest = max(("cublas", "hopper_gemm"), key=tflops.get)
    metrics["fastest_triton"] = best
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "baselines": [{"name": name, "value": round(v, 2), "ratio": round(tflops[best] / v, 4)}
                          for name, v in tflops.items() if name != best],
            "headline": ctx.headline("tflops", tflops[best], "TFLOP/s", peak_key="bf16",
                                     baseline=(strongest, tflops[strongest]))}


def _triton_version() -> str:
    import triton

    return triton.__version__


def negative_control(ctx: Context) -> dict:
    """The pointer variant with its K loop one 64-wide block short (an off-by-one loop bound):
    1 of 256 K blocks never read at 2048x2048x16384, gated against cuBLAS's error like the cases."""
    import torch

    from artifacts.kernels.triton_matmul import persistent_matmul as ours

    a, w = _operands(2048, 2048, 16384, ctx.generator(salt=99))
    ref = a.double() @ w.double().t()
    tolerance = gates.reference_tolerance(torch.matmul(a, w.t()), ref)
    c = gates.poison(torch.empty(2048, 2048, dtype=torch.bfloat16, device="cuda"))
    ours.launcher(a[:, :-64], w[:, :-64], c, **VARIANTS["triton pointers 128x256x64 w8 s3"])()
    torch.cuda.synchronize()
    return gates.check(c, ref, "bf16", **tolerance)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """Each variant built for this GPU (Triton compiles for the device it finds) on a small problem,
    its PTX scanned; a variant this Triton refuses adds a note instead."""
    import torch

    from artifacts.kernels.triton_matmul import persistent_matmul as ours

    if not torch.cuda.is_available():
        raise RuntimeError("Triton compiles for the GPU it runs on: compile-only needs one")
    a = torch.zeros(256, 256, dtype=torch.bfloat16, device="cuda")
    w = torch.zeros(256, 256, dtype=torch.bfloat16, device="cuda")
    emitted = compile_mod.Emitted(arch)
    for name, settings in VARIANTS.items():
        try:
            compiled = ours.launcher(a, w, torch.empty_like(a), **settings)()
        except Exception as err:
            emitted.notes.append(f"{name}: {_unsupported(err)}")
            continue
        emitted.ptx += compiled.asm.get("ptx", "")
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
