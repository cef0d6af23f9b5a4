"""probe-footgun-graph-memcpy: copy_ inside a CUDA graph (a memcpy node) against an SM copy kernel.

The harness times both the one way every probe is timed (kernelwiki.harness.timing.bench: CUDA-graph
replays); the eager case times copy_ with CUDA events around each launch after an L2 read sweep
(the harness's Timer). Each copy is checked bit for bit first.

Run through the runner: kernelwiki probe run --probe probe-footgun-graph-memcpy
"""

from __future__ import annotations

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

COPIES = {"memcpy-node": "torch copy_", "sm-copy": "SM copy (x * 1)", "memcpy-eager": "torch copy_ (eager)"}


def _launch(kind: str):
    import torch

    if kind == "sm-copy":
        return lambda s: torch.mul(s[0], 1.0, out=s[1])
    return lambda s: s[1].copy_(s[0])


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    kind = case["id"].rsplit("-", 1)[0]
    elements = case["params"]["bytes"] // 4
    moved = 2 * elements * 4

    def make_inputs(i: int) -> tuple:
        src = torch.randn(elements, device="cuda", generator=ctx.generator(7 + 100 * i))
        return src, gates.poison(torch.empty_like(src))

    checked = make_inputs(0)
    checks = {}
    for name in ("memcpy-node", "sm-copy"):
        gates.poison(checked[1])
        _launch(name)(checked)
        torch.cuda.synchronize()
        checks[name] = gates.check(checked[1], checked[0], "exact")
    correctness = gates.combine(checks)
    if kind == "memcpy-eager":
        timer = ctx.timer(warmup=3, iters=30, flush="read", order="shuffled")
        timing = timer.compare({COPIES[kind]: lambda: _launch(kind)(checked),
                                COPIES["sm-copy"]: lambda: _launch("sm-copy")(checked)})
    else:
        timing = ctx.bench({COPIES[kind]: _launch(kind), **({} if kind == "sm-copy" else {COPIES["sm-copy"]: _launch("sm-copy")})},
                           lambda i: checked if i == 0 else make_inputs(i), moved, iters=30, warmup=3)
    tbps = {name: moved / (t["median_ms"] * 1e-3) / 1e12 for name, t in timing.items()}
    ours = COPIES[kind]
    baseline = None if kind == "sm-copy" else (COPIES["sm-copy"], tbps[COPIES["sm-copy"]])
    return {"correctness": correctness, "timing": timing, "metrics": {"bytes_moved": moved},
            "baselines": [{"name": name, "value": round(v, 4)} for name, v in tbps.items() if name != ours],
            "headline": ctx.headline("bandwidth", tbps[ours], "TB/s", peak_key="copy", baseline=baseline)}


def negative_control(ctx: Context) -> dict:
    """One element of the copy changed: the exact gate must refuse it."""
    import torch

    src = torch.randn(1 << 22, device="cuda", generator=ctx.generator(9))
    dst = gates.poison(torch.empty_like(src))
    dst.copy_(src)
    dst[4321] = dst[4321] * (1 + 2**-20)   # one ulp-scale change in one element
    return gates.check(dst, src, "exact")


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
