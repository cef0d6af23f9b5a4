"""probe-tma-store: a GEMM-style epilogue (output tile a[r] * b[c] written from shared memory)
stored by TMA against st.global, split-K partials added by TMA reduce-add against atomicAdd, and
the missing-fence footgun (st.shared then TMA store without fence.proxy.async) run many times to
record what it does on this GPU.

Correctness first: the store epilogues must match the bf16-rounded product exactly (output
poisoned first); the reduce epilogues, run once into a zeroed output, must match an fp64 sum of
the partials within the fp32 gate. Timing: ctx.bench, every candidate of a case on the same sets.

Run through the runner: kernelwiki probe run --probe probe-tma-store [--compile-only]
"""

from __future__ import annotations

from functools import lru_cache

from kernelwiki.harness import compile as compile_mod
from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

from artifacts.kernels.tma_store import tma_store


@lru_cache(maxsize=1)
def _kernels() -> tma_store.EpilogueKernels:
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context exists before the library's runtime starts
    return tma_store.EpilogueKernels(compile_mod.nvcc_library(tma_store.SOURCE, "sm_90a"))


def _stream() -> int:
    import torch

    return torch.cuda.current_stream().cuda_stream


def _vectors(ctx: Context, salt: int, *shape):
    import torch

    return torch.randn(*shape, device="cuda", generator=ctx.generator(salt))


def _store_set(ctx: Context, m: int, n: int, salt: int):
    import torch

    return _vectors(ctx, salt, m), _vectors(ctx, salt + 1, n), torch.empty(m, n, dtype=torch.bfloat16, device="cuda")


def _checked_store(launch, ctx: Context, m: int, n: int, salt: int) -> dict:
    import torch

    a, b, out = _store_set(ctx, m, n, salt)
    gates.poison(out)
    launch(a, b, out)
    torch.cuda.synchronize()
    return gates.check(out, tma_store.store_reference(a, b), "exact")


def store(case: dict, ctx: Context) -> dict:
    p = case["params"]
    m, n = int(p["m"]), int(p["n"])
    k = _kernels()
    launches = {"TMA store": lambda a, b, out: k.tma_store(a, b, out, stream=_stream()),
                "st.global": lambda a, b, out: k.st_global(a, b, out, stream=_stream())}
    correctness = gates.combine({name: _checked_store(fn, ctx, m, n, 10) for name, fn in launches.items()})
    timing = ctx.bench({name: (lambda s, fn=fn: fn(*s)) for name, fn in launches.items()},
                       lambda i: _store_set(ctx, m, n, 100 + 2 * i), m * n * 2 + (m + n) * 4)
    tbs = {name: m * n * 2 / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    return {"correctness": correctness, "timing": timing,
            "metrics": {f"{name} TB/s": round(v, 3) for name, v in tbs.items()},
            "headline": ctx.headline("bandwidth", tbs["TMA store"], "TB/s", baseline=("st.global", tbs["st.global"]))}


def _reduce_set(ctx: Context, m: int, n: int, splits: int, salt: int):
    import torch

    return (_vectors(ctx, salt, splits, m), _vectors(ctx, salt + 1, splits, n),
            torch.zeros(m, n, dtype=torch.float32, device="cuda"))


def _checked_reduce(launch, ctx: Context, m: int, n: int, splits: int, salt: int) -> dict:
    import torch

    a, b, out = _reduce_set(ctx, m, n, splits, salt)
    launch(a, b, out)
    torch.cuda.synchronize()
    return gates.check(out, tma_store.reduce_reference(a, b), "fp32")


def _reduce_launches(k: tma_store.EpilogueKernels) -> dict:
    return {"TMA reduce-add": lambda a, b, out: k.tma_reduce(a, b, out, stream=_stream()),
            "atomicAdd float4": lambda a, b, out: k.atomic(a, b, out, stream=_stream(), vector=True),
            "atomicAdd float": lambda a, b, out: k.atomic(a, b, out, stream=_stream(), vector=False)}


def reduce(case: dict, ctx: Context) -> dict:
    p = case["params"]
    m, n, splits = int(p["m"]), int(p["n"]), int(p["splits"])
    launches = _reduce_launches(_kernels())
    correctness = gates.combine({name: _checked_reduce(fn, ctx, m, n, splits, 20) for name, fn in launches.items()})
    # each timed launch adds into its set's output again: the values grow, the traffic is the same
    timing = ctx.bench({name: (lambda s, fn=fn: fn(*s)) for name, fn in launches.items()},
                       lambda i: _reduce_set(ctx, m, n, splits, 200 + 2 * i), m * n * 4 + splits * (m + n) * 4)
    tbs = {name: splits * m * n * 4 / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    best_atomic = max((name for name in tbs if name.startswith("atomicAdd")), key=tbs.get)
    return {"correctness": correctness, "timing": timing,
            "metrics": {**{f"{name} TB/s": round(v, 3) for name, v in tbs.items()},
                        "bytes_counted": "splits x m x n x 4 (each partial added once)"},
            "headline": ctx.headline("bandwidth", tbs["TMA reduce-add"], "TB/s",
                                     baseline=(best_atomic, tbs[best_atomic]))}


def missing_fence(case: dict, ctx: Context) -> dict:
    """The fenced TMA store checked once; the unfenced one launched `launches` times on fresh
    inputs, each output compared exactly: how many launches and elements came out wrong."""
    import torch

    p = case["params"]
    m, n, launches = int(p["m"]), int(p["n"]), int(p["launches"])
    k = _kernels()
    correctness = _checked_store(lambda a, b, out: k.tma_store(a, b, out, stream=_stream()), ctx, m, n, 30)
    wrong_launches, wrong_elements = 0, 0
    for i in range(launches):
        result = _checked_store(lambda a, b, out: k.tma_store(a, b, out, stream=_stream(), fence=False),
                                ctx, m, n, 300 + 2 * i)
        bad = int(result.get("mismatched") or 0) if not result["passed"] else 0
        wrong_launches += bad > 0
        wrong_elements += bad
    torch.cuda.synchronize()
    metrics = {"unfenced_launches": launches, "unfenced_launches_wrong": wrong_launches,
               "unfenced_elements_wrong": wrong_elements, "elements_per_launch": m * n}
    return {"correctness": correctness, "metrics": metrics,
            "headline": ctx.headline("mismatched-elements", wrong_elements, "elements")}


KINDS = {"store": store, "reduce": reduce, "fence": missing_fence}


def run_case(case: dict, ctx: Context) -> dict:
    return KINDS[case["params"]["kind"]](case, ctx)


def negative_control(ctx: Context) -> dict:
    """The TMA store whose tensor map gives the row pitch in elements instead of bytes (the unit
    slip cuTensorMapEncodeTiled accepts whenever the pitch stays a multiple of 16) must fail the
    exact gate: rows land at the wrong addresses."""
    k = _kernels()
    return _checked_store(lambda a, b, out: k.tma_store(a, b, out, stream=_stream(), pitch_in_elements=True),
                          ctx, 4096, 4096, 99)


def compile_kernel(arch: str) -> compile_mod.Emitted:
    return compile_mod.nvcc(tma_store.SOURCE, arch)


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control, compile=compile_kernel)
