"""probe-benchmark-pitfalls: how far each common benchmarking mistake moves the time of one bf16
GEMM (torch.matmul, cuBLAS), against the harness's protocol (ctx.bench) in the same run.

Each case times the GEMM the wrong way, explicitly (the mistake is the subject, so it is written
out here rather than hidden in the harness), and the right way through ctx.bench; the headline is
the wrong time with the right one as its baseline (a ratio under 1: the mistake makes the GEMM
look faster). The GEMM's output is checked against an fp32 product first, bf16 gate.

- warm-l2: a graph of many launches on one input set (its operands stay in the L2) against
  ctx.bench's sets rotated past 3x L2. A small-M GEMM whose weight fits in the L2 shows it most.
- event-pair: synchronize, then CUDA events around one launch (host submission inside the window).
- zeros: ctx.bench on all-zero operands against ctx.bench on normal ones (footgun-low-entropy-inputs).
- cached-output: a wrapper that returns its previous result when called on the same tensors,
  timed as a loop on one input set - what a benchmark that reuses one input set lets through.
- side-stream: the GEMM launched on a side stream the events on the current stream do not wait
  for; ctx.bench on the same candidate is also tried and its refusal recorded.
- host-timer: time.perf_counter around the call with no synchronize (the launch, not the GEMM).

Run through the runner: kernelwiki probe run --probe probe-benchmark-pitfalls
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

from kernelwiki.harness import gates
from kernelwiki.harness.probe import Context, Probe

REPEATS = 30          # wrong-way timings per case (median kept)
LOOP_LAUNCHES = 20    # launches per timed loop where a mistake times a loop
DRIFT = 0.05          # cached-output: the next input set differs by this much (an optimizer step)


def address(t) -> int:
    """Where a tensor's data lives (torch: data_ptr; numpy: its buffer address)."""
    return t.data_ptr() if hasattr(t, "data_ptr") else t.ctypes.data


class CachedOutput:
    """The reward hack: compute once, then return the stored result whenever called again on the
    same buffers (by address), as a kernel that caches its output would. Keyed on addresses, it is
    also wrong in real use: a training step updates weights in place, at the same address.
    `matmul(a, b, out)` is the real computation."""

    def __init__(self, matmul: Callable):
        self.matmul, self.key = matmul, None

    def __call__(self, a, b, out):
        key = (address(a), address(b), address(out))
        if key != self.key:
            self.matmul(a, b, out)
            self.key = key
        return out


def drifted(a, generator, scale: float = DRIFT):
    """The next step's operand: a plus scale x a normal perturbation of a's RMS."""
    import torch

    return (a.float() + scale * a.float().pow(2).mean().sqrt()
            * torch.randn(a.shape, device=a.device, generator=generator)).to(a.dtype)


def _shape(params: dict) -> tuple[int, int, int]:
    m, n, k = (int(v) for v in params["shape"].split("x"))
    return m, n, k


def _operands(m: int, n: int, k: int, generator, kind: str = "normal"):
    import torch

    if kind == "zeros":
        return (torch.zeros(m, k, device="cuda", dtype=torch.bfloat16),
                torch.zeros(k, n, device="cuda", dtype=torch.bfloat16))
    return (torch.randn(m, k, device="cuda", generator=generator).to(torch.bfloat16),
            torch.randn(k, n, device="cuda", generator=generator).to(torch.bfloat16))


def _matmul(a, b, out):
    import torch

    return torch.matmul(a, b, out=out)


def _checked(a, b, out, fn: Callable = _matmul) -> dict:
    import torch

    gates.poison(out)
    fn(a, b, out)
    torch.cuda.synchronize()
    return gates.check(out, torch.matmul(a.float(), b.float()), "bf16")


def _events_ms(launch: Callable[[], object], stream=None) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record(stream)
    launch()
    end.record(stream)
    end.synchronize()
    return start.elapsed_time(end)


def _honest(ctx: Context, m: int, n: int, k: int, kind: str = "normal", fn: Callable = _matmul) -> dict:
    import torch

    def make_inputs(i: int):
        a, b = _operands(m, n, k, ctx.generator(100 + i), kind)
        return a, b, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    return ctx.bench({"gemm": lambda s: fn(*s)}, make_inputs, (m * k + k * n + m * n) * 2)["gemm"]


def _median_ms(time_one: Callable[[], float]) -> float:
    time_one()   # warm-up
    return statistics.median(time_one() for _ in range(REPEATS))


def run_case(case: dict, ctx: Context) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    pitfall = case["params"]["pitfall"]
    m, n, k = _shape(case["params"])
    a, b = _operands(m, n, k, ctx.generator())
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    correctness = _checked(a, b, out)
    honest = _honest(ctx, m, n, k)
    metrics: dict = {}
    if pitfall == "warm-l2":
        from kernelwiki.harness.timing import cuda_graph

        launches = honest["protocol"].get("launches") or LOOP_LAUNCHES
        replay = cuda_graph(lambda: [_matmul(a, b, out) for _ in range(launches)])
        wrong_ms = _median_ms(lambda: _events_ms(replay)) / launches
        metrics["launches_per_graph"] = launches
    elif pitfall == "event-pair":
        wrong_ms = _median_ms(lambda: _events_ms(lambda: _matmul(a, b, out)))
    elif pitfall == "zeros":
        za, zb = _operands(m, n, k, None, "zeros")
        zero_out = torch.empty_like(out)
        correctness = gates.combine({"normal": correctness, "zeros": _checked(za, zb, zero_out)})
        wrong_ms = _honest(ctx, m, n, k, kind="zeros")["median_ms"]
    elif pitfall == "cached-output":
        fake = CachedOutput(_matmul)
        wrong_ms = _median_ms(lambda: _events_ms(lambda: [fake(a, b, out) for _ in range(LOOP_LAUNCHES)])) \
            / LOOP_LAUNCHES
        real_loop_ms = _median_ms(lambda: _events_ms(lambda: [_matmul(a, b, out) for _ in range(LOOP_LAUNCHES)])) \
            / LOOP_LAUNCHES
        metrics["real_same_loop_us"] = round(real_loop_ms * 1e3, 3)
    elif pitfall == "side-stream":
        side = torch.cuda.Stream()

        def on_side():
            with torch.cuda.stream(side):
                _matmul(a, b, out)

        wrong_ms = _median_ms(lambda: _events_ms(on_side))
        side.synchronize()

        def make_inputs(i: int):
            x, y = _operands(m, n, k, ctx.generator(200 + i))
            return x, y, torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def side_candidate(s):
            with torch.cuda.stream(side):
                _matmul(*s)

        try:
            ctx.bench({"side": side_candidate}, make_inputs, (m * k + k * n + m * n) * 2)
            metrics["bench_refused"] = False
        except Exception as err:   # the refusal (or the capture error) is the finding
            metrics["bench_refused"] = f"{type(err).__name__}: {str(err)[:300]}"
        torch.cuda.synchronize()
    elif pitfall == "host-timer":
        def host_ms() -> float:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            _matmul(a, b, out)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            return (t1 - t0) * 1e3

        wrong_ms = _median_ms(host_ms)
    else:
        raise ValueError(f"unknown pitfall {pitfall!r}")
    metrics.update(honest_p10_us=round(honest["p10_ms"] * 1e3, 3), honest_p90_us=round(honest["p90_ms"] * 1e3, 3),
                   honest_method=honest["protocol"].get("method"))
    timing = {"wrong way": {"median_ms": wrong_ms, "iterations": REPEATS}, "ctx.bench": honest}
    return {"correctness": correctness, "timing": timing, "metrics": metrics,
            "headline": ctx.headline("time", wrong_ms * 1e3, "us", baseline=("ctx.bench", honest["median_ms"] * 1e3))}


def negative_control(ctx: Context) -> dict:
    """The cached-output wrapper after an in-place update of its first operand (an optimizer step
    of DRIFT, same address) must fail the bf16 gate: it returns the previous product. The output is
    not poisoned here (a poisoned buffer would fail it by far): what is gated is what the hack
    leaves, the stale product, whose error is about DRIFT against the gate's 2e-2."""
    import torch

    m, n, k = 512, 4096, 4096
    a, b = _operands(m, n, k, ctx.generator(7))
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fake = CachedOutput(_matmul)
    fake(a, b, out)
    a.copy_(drifted(a, ctx.generator(8)))
    fake(a, b, out)
    torch.cuda.synchronize()
    return gates.check(out, torch.matmul(a.float(), b.float()), "bf16")


if __name__ == "__main__":
    Probe(__file__).main(run_case=run_case, negative_control=negative_control)
