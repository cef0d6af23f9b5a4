"""probe-decode-gemm: decode-shaped GEMMs (M = 1..64) - split-K and swap-AB with our Hopper GEMM vs cuBLAS.

Our split-K is reduced inside the kernel, in one launch: every split stores its FP32 partial, the
last split of an output tile to arrive (a counter per tile) sums the partials in split order and
writes y (hopper_gemm.HopperGemm.reduce_partials).

Every case (M tokens against one LLM weight matrix W: N x K, y = x @ W^T in bf16):
  1. correctness first: fresh normal inputs, each output poisoned, gated against a float64
     reference with the tolerance derived from cuBLAS's own error at that shape - for cuBLAS, our
     kernel with its own choice of split-K, our kernel forced to split_k = 1 and to twice its
     choice, and its swap-AB path (compile_gemm(swap_ab=True): the kernel computes D^T = W x^T, W
     as its A operand and x as its B, and stores D^T M-major, which is y (M, N) itself: no padding
     of x, no transpose); the split-K result is also computed twice and compared bit for bit (its
     sum runs in a fixed order);
  2. ctx.bench of all of them on the same rotated input sets.
"ours" is the kernel's default choice (swap-AB where choose_config's rule swap_ab_pays says so),
timed beside the problem as given ("unswapped": its split-K choice, no split, twice the split) and a
forced swap where the default does not swap, so one run tells whether the rule and the timings agree. The headline is our kernel's own choice in TB/s of compulsory bytes (W once, x, y)
against cuBLAS.
Stream-K is not implemented in our kernel (the page cites CUTLASS's scheduler for what it is).

Run through the runner: kernelwiki probe run --probe probe-decode-gemm [--compile-only]
"""

from __future__ import annotations

import math

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

def compulsory_bytes(m: int, n: int, k: int) -> int:
    """bf16 W once, x once, y once: what any kernel must move."""
    return 2 * (n * k + m * k + m * n)


def workspace_bytes(m: int, n: int, config) -> int:
    """What our split-K allocates beside y (hopper_gemm.split_workspace): a whole FP32 tile per split
    of each output tile (of which the kernel touches the rows inside M) and an Int32 counter per
    output tile; 0 without a split."""
    from artifacts.kernels.hopper_gemm import hopper_gemm

    partials, counters = hopper_gemm.split_workspace(m, n, 1, config)
    return 4 * (partials + counters)


def _operands(m: int, n: int, k: int, generator):
    import torch

    x = torch.randn(m, k, generator=generator, device="cuda").bfloat16()
    w = torch.randn(n, k, generator=generator, device="cuda").bfloat16()
    return x, w


def _reference(x, w):
    return x.double() @ w.double().t()


def _variants(x, w, chosen_split: int) -> dict:
    """{name: (run, (M, N) output)} of our kernel on x, w: its default choice ("ours": swap-AB where
    swap_ab_pays), and the problem as given ("unswapped": choose_config's split, then forced to no
    split and to twice it); a forced swap where the default does not swap."""
    from artifacts.kernels.hopper_gemm import config, hopper_gemm

    out = {"ours": hopper_gemm.compile_gemm(x, w), "unswapped": hopper_gemm.compile_gemm(x, w, swap_ab=False)}
    for split in sorted({1, min(config.MAX_SPLIT_K, 2 * chosen_split)} - {chosen_split}):
        out[f"unswapped split_k={split}"] = hopper_gemm.compile_gemm(x, w, split_k=split, swap_ab=False)
    if not out["ours"][0].config.swap_ab:
        out["swap-ab"] = hopper_gemm.compile_gemm(x, w, swap_ab=True)
    return out


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    from artifacts.kernels.hopper_gemm import hopper_gemm

    p = case["params"]
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    x, w = _operands(m, n, k, ctx.generator())
    ref = _reference(x, w)
    y_cublas = gates.poison(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
    torch.matmul(x, w.t(), out=y_cublas)
    tolerance = gates.reference_tolerance(y_cublas, ref)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = hopper_gemm.choose_config(m, n, k, sms=sms)
    rule_swaps = hopper_gemm.choose_config(m, n, k, sms=sms, allow_swap=True).swap_ab
    variants = _variants(x, w, chosen.split_k)
    parts = {"cublas": gates.check(y_cublas, ref, "bf16", **tolerance)}
    for name, (run, d) in variants.items():
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        parts[name] = gates.check(d, ref, "bf16", **tolerance)
    correctness = gates.combine(parts)
    if chosen.split_k > 1:   # a fixed-order sum: the same bits every time
        run, d = variants["unswapped"]
        first = d.clone()
        gates.poison(d)
        run()
        torch.cuda.synchronize()
        correctness["split_k_bitwise_repeatable"] = bool(torch.equal(first, d))
        correctness["passed"] = correctness["passed"] and correctness["split_k_bitwise_repeatable"]
    del ref

    def make_inputs(i: int) -> dict:
        """Input set i: operands, cuBLAS's output and every variant of ours bound to them (set 0: the checked ones)."""
        xs, ws = (x, w) if i == 0 else _operands(m, n, k, ctx.generator(salt=1 + i))
        bound = variants if i == 0 else _variants(xs, ws, chosen.split_k)
        s = {"x": xs, "w": ws, "y": torch.empty(m, n, dtype=torch.bfloat16, device="cuda")}
        s.update({name: run for name, (run, _) in bound.items()})
        return s

    candidates = {"cublas": lambda s: torch.matmul(s["x"], s["w"].t(), out=s["y"])}
    candidates.update({name: (lambda s, name=name: s[name]()) for name in variants})
    moved = compulsory_bytes(m, n, k)
    timing = ctx.bench(candidates, make_inputs, moved)
    tbs = {name: moved / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    swapped = hopper_gemm.swapped_config(m, n, k, sms=sms)
    metrics = {"ours_config": variants["ours"][0].config.describe(),
               "unswapped_config": chosen.describe(), "unswapped_split_k": chosen.split_k,
               "unswapped_workspace_bytes": workspace_bytes(m, n, chosen),
               "output_tiles_unswapped": math.ceil(m / chosen.tile_m) * math.ceil(n / chosen.tile_n),
               "output_tiles_of_swap_ab": math.ceil(n / swapped.tile_m) * math.ceil(m / swapped.tile_n),
               "swap_ab_rule_picks_swap": rule_swaps}
    for name, t in timing.items():
        metrics[f"{name}_us"] = round(t["median_ms"] * 1e3, 2)
        metrics[f"{name}_tb_s"] = round(tbs[name], 3)
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "baselines": [{"name": name, "value": round(v, 3), "ratio": round(tbs["ours"] / v, 4)}
                          for name, v in tbs.items() if name != "ours"],
            "headline": ctx.headline("bandwidth", tbs["ours"], "TB/s", peak_key="copy", ceiling_key="copy",
                                     baseline=("cublas", tbs["cublas"]))}


# The split-K control: M = 16 against 4096 x 15424 (241 K tiles of 64) in 64 x 256 tiles split 16
# ways, so the last K range holds one K tile (16 ranges of 16, then 1)
CONTROL_SHAPE = (16, 4096, 15424)
CONTROL_SPLIT_K = 16
CONTROL_TILE = (64, 256)


def control_skipped_slice(ctx: Context) -> dict:
    """The in-kernel split-K reduction with an off-by-one loop bound in output tile (0, 0): its last
    split sums split_k - 1 partials, missing the last range (1 of 241 K tiles in 256 of 4096 columns;
    about 2x the gate by the reference math, tests/test_decode_gemm_probe.py), gated like the cases."""
    import torch

    from artifacts.kernels.hopper_gemm import hopper_gemm

    x, w = _operands(*CONTROL_SHAPE, ctx.generator(salt=99))
    ref = _reference(x, w)
    tolerance = gates.reference_tolerance(torch.matmul(x, w.t()), ref)
    run, d = hopper_gemm.compile_gemm(x, w, split_k=CONTROL_SPLIT_K, tile_m=CONTROL_TILE[0], tile_n=CONTROL_TILE[1],
                                      skip_last_slice=True)
    gates.poison(d)
    run()
    torch.cuda.synchronize()
    return gates.check(d, ref, "bf16", **tolerance)


NEGATIVE_CONTROLS = {"split-k-skips-last-slice": control_skipped_slice}


def compile_kernel(arch: str) -> compile_mod.Emitted:
    """The configurations these cases take: 64-row tiles 256 wide without and with the in-kernel
    split-K (and 128 x 64 with it), the control's broken reduction, and swap-AB's 64-row tiles over N,
    16, 32 or 64 wide over the tokens, with the M-major (transposed stmatrix) store."""
    from artifacts.kernels.hopper_gemm import hopper_gemm

    emitted = compile_mod.from_cute(hopper_gemm.compile_for(arch, m=1, tile_m=64, tile_n=256, cluster_mn=(1, 1)), arch)
    for tile_m, tile_n, variant in ((64, 256, {}), (128, 64, {}), (*CONTROL_TILE, {"skip_last_slice": True})):
        emitted.extend(compile_mod.from_cute(hopper_gemm.compile_for(arch, m=1, tile_m=tile_m, tile_n=tile_n,
                                                                      cluster_mn=(1, 1), split_k=2, **variant), arch))
    for tile_n in (16, 32, 64):
        emitted.extend(compile_mod.from_cute(hopper_gemm.compile_for(arch, tile_m=64, tile_n=tile_n, cluster_mn=(1, 1),
                                                                      d_major="m"), arch))
    return emitted


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=NEGATIVE_CONTROLS, compile=compile_kernel)
