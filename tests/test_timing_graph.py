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
