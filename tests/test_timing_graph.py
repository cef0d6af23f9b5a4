"""timing.cuda_graph: a Python loop of launches captured once and replayed (needs a GPU)."""

from __future__ import annotations

import pytest

from kernelwiki.harness.timing import cuda_graph


@pytest.mark.gpu
def test_cuda_graph_replays_every_launch_of_the_loop():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    x = torch.zeros(4, device="cuda")
    replay = cuda_graph(lambda: [x.add_(1) for _ in range(3)])
    torch.cuda.synchronize()
    assert x.tolist() == [3.0] * 4          # the warm-up ran the loop once; the capture ran nothing
    replay()
    torch.cuda.synchronize()
    assert x.tolist() == [6.0] * 4          # one replay = the three launches


@pytest.mark.gpu
def test_bench_times_a_short_and_a_long_candidate_on_the_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from kernelwiki.harness import timing

    def make_inputs(i: int) -> dict:
        g = torch.Generator(device="cuda").manual_seed(i)
        return {"a": torch.randn(4096, 4096, device="cuda", generator=g).bfloat16(),
                "x": torch.randn(4096, device="cuda", generator=g).bfloat16()}

    results = timing.bench({"gemv": lambda s: s["a"] @ s["x"], "gemm": lambda s: s["a"] @ s["a"]},
                           make_inputs, 4096 * 4096 * 2 + 4096 * 2, iters=5)
    assert results["gemv"]["protocol"]["method"] == "short"
    assert results["gemv"]["protocol"]["input_sets"] > 1 and results["gemv"]["protocol"]["l2_rotation"] >= 3
    assert results["gemm"]["protocol"]["method"] == "long"
    for entry in results.values():
        assert entry["median_ms"] >= entry["protocol"]["floor_ms"]
