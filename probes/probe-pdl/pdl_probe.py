"""probe-pdl: the gap between dependent kernels without PDL, with PDL, and with PDL plus an early trigger.

Each call launches PAIRS producer/consumer pairs (artifacts/kernels/pdl); ctx.bench captures calls
into a CUDA graph, so the number is the GPU's time per pair with no CPU launch cost in it, and the
difference between modes is what PDL removes from the kernel-to-kernel gap.

Run through the runner: kernelwiki probe run --probe probe-pdl [--compile-only]
"""

from __future__ import annotations

from functools import lru_cache

from artifacts.kernels.pdl import chain
from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe
from kernelwiki.harness.timing import cuda_graph

PAIRS = 64
NEGATIVE_DELAY_CYCLES = 200_000   # the producer spins ~0.1 ms before it writes: the stale read is certain
_timed: dict[int, dict] = {}       # n -> bench result of the three modes


@lru_cache(maxsize=1)
def _chain() -> chain.Chain:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context first; the library's runtime joins it
    return chain.Chain(compile_mod.nvcc_library(chain.SOURCE, "sm_90a"))


def _grid() -> int:
    import torch

    return chain.CTAS_PER_SM * torch.cuda.get_device_properties(0).multi_processor_count


def _inputs(ctx: Context, n: int, salt: int) -> dict:
    import torch

    g = ctx.generator(salt)
    x = torch.randn(n, generator=g, device="cuda")
    return {"x": x, "bias": torch.randn(n, generator=g, device="cuda"), "out": x.clone(),
            "buf": gates.poison(torch.empty(n, device="cuda"))}


def _launcher(mode: chain.Mode, **kwargs):
    import torch

    def launch(inputs: dict) -> None:
        _chain().pairs(inputs["buf"], inputs["out"], inputs["bias"], pairs=PAIRS, mode=mode, grid=_grid(),
                       stream=torch.cuda.current_stream().cuda_stream, **kwargs)
    return launch


def check(ctx: Context, n: int, mode: chain.Mode, salt: int, **kwargs) -> dict:
    """One call captured as a graph, replayed once from a fresh input and a poisoned buf."""
    import torch

    inputs = _inputs(ctx, n, salt)
    launch = _launcher(mode, **kwargs)
    replay = cuda_graph(lambda: launch(inputs))   # runs once eagerly and once captured
    inputs["out"].copy_(inputs["x"])
    gates.poison(inputs["buf"])
    replay()
    torch.cuda.synchronize()
    result = gates.check(inputs["out"], chain.reference(inputs["x"], inputs["bias"], PAIRS), "exact")
    result["stale_elements"] = chain.steps_missed(inputs["out"], inputs["x"], inputs["bias"], PAIRS)
    return result


def run_case(case: dict, ctx: Context) -> dict:
    n, mode = case["params"]["n"], chain.MODES[case["params"]["mode"]]
    correctness = check(ctx, n, mode, salt=1)
    if n not in _timed:
        candidates = {name: _launcher(m) for name, m in chain.MODES.items()}
        _timed[n] = ctx.bench(candidates, lambda i: _inputs(ctx, n, 100 + i), 4 * 4 * n)
    timing = _timed[n]
    per_pair_ns = {name: t["median_ms"] * 1e6 / PAIRS for name, t in timing.items()}
    metrics = {"pairs_per_call": PAIRS, "kernels_per_pair": 2, "grid_ctas": _grid(), "block": chain.BLOCK,
               **{f"ns_per_pair_{name}": round(v, 1) for name, v in per_pair_ns.items()}}   # metrics are scalars
    baseline = None if mode.name == "serial" else ("serial", per_pair_ns["serial"])
    return {"correctness": correctness, "timing": {mode.name: timing[mode.name]}, "metrics": metrics,
            "headline": ctx.headline("time-per-pair", per_pair_ns[mode.name], "ns", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """The consumer forgets griddepcontrol.wait; the producer triggers early and spins before writing."""
    return check(ctx, 32768, chain.MODES["pdl-early"], salt=2, consumer_waits=False,
                 producer_delay=NEGATIVE_DELAY_CYCLES)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(chain.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
