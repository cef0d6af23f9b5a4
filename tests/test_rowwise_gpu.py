"""The row-wise kernels on the GPU, beyond the probe's shapes: every row plan (warp-only, block and
cluster reductions, clusters of 2 to 8 CTAs, column predicates), M not a multiple of the rows per CTA,
M = 1, strided rows, fp16, graph capture on a side stream, the broken variants the negative control
runs, and the ValueErrors for what the kernels refuse. Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU", allow_module_level=True)
from artifacts.kernels.rowwise import rmsnorm_forward, softmax_forward  # noqa: E402

from kernelwiki.harness import gates  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = 1e-6
NS = [8, 64, 1024, 2928, 4096, 8192, 16384, 16392, 32768, 50000, 100000, 131072]


def _inputs(m: int, n: int, dtype=torch.bfloat16, seed: int = 0, row_stride: int | None = None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    stride = row_stride or n
    x = torch.randn(m, stride, device="cuda", generator=g).to(dtype)[:, :n]
    w = (1.0 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(dtype)
    return x, w


def _reference(op: str, x, w):
    xf = x.float()
    if op == "rmsnorm":
        return xf * torch.rsqrt(xf.square().mean(dim=-1, keepdim=True) + EPS) * w.float()
    return torch.softmax(xf, dim=-1)


def _run(op: str, x, w, out=None, **broken):
    if op == "rmsnorm":
        return rmsnorm_forward(x, w, out, EPS, **broken)
    return softmax_forward(x, out, **broken)


def _check(op: str, x, w, out):
    """Fixed bounds (a few times one bf16 rounding), since a derived gate is noisy on a handful of
    elements: relative error 5e-3, and no element off by more than 2^-7 of the largest output."""
    ref = _reference(op, x, w)
    result = gates.check(out, ref, "bf16", tol=5e-3, max_abs_tol=float(ref.abs().max()) * 2**-7)
    assert result["passed"], result


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", [1, 3, 37])
def test_every_plan_matches_the_reference(op, m, n):
    x, w = _inputs(m, n, seed=m + n)
    out = gates.poison(torch.empty_like(x))
    _run(op, x, w, out)
    torch.cuda.synchronize()
    _check(op, x, w, out)


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_strided_rows_and_fp16(op):
    x, w = _inputs(65, 4096, dtype=torch.float16, row_stride=4096 + 64)
    out = gates.poison(torch.empty(65, 4096 + 8, device="cuda", dtype=torch.float16))[:, :4096]
    _run(op, x, w, out)
    torch.cuda.synchronize()
    _check(op, x, w, out)


@pytest.mark.parametrize("op", ["rmsnorm", "softmax"])
def test_graph_capture_on_a_side_stream(op):
    x, w = _inputs(256, 32768)
    out = torch.empty_like(x)
    _run(op, x, w, out)   # compile outside the capture
    stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    gates.poison(out)
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            _run(op, x, w, out)
    graph.replay()
    torch.cuda.synchronize()
    _check(op, x, w, out)


@pytest.mark.parametrize("op, broken", [("rmsnorm", {"tile_mean": True}), ("softmax", {"zero_padding": True})])
def test_the_broken_variants_fail_the_gate_at_the_ragged_length(op, broken):
    x, w = _inputs(1024, 2928)
    out = gates.poison(torch.empty_like(x))
    _run(op, x, w, out, **broken)
    torch.cuda.synchronize()
    ref = _reference(op, x, w)
    library = torch.nn.functional.rms_norm(x, (2928,), w, EPS) if op == "rmsnorm" else torch.softmax(x, -1)
    assert not gates.check(out, ref, "bf16", **gates.reference_tolerance(library, ref))["passed"]


def test_refusals_name_the_value():
    x, w = _inputs(4, 4096)
    with pytest.raises(ValueError, match=r"dtype torch.float32 unsupported"):
        softmax_forward(x.float())
    with pytest.raises(ValueError, match=r"last-dimension stride .* != 1"):
        softmax_forward(torch.empty(4096, 4, device="cuda", dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match=r"is not 16-byte aligned"):
        softmax_forward(torch.empty(4 * 4096 + 8, device="cuda", dtype=torch.bfloat16)[1:1 + 4 * 4096].view(4, 4096))
    with pytest.raises(ValueError, match=r"row stride 4100 is not a multiple of 8"):
        softmax_forward(torch.empty(4, 4100, device="cuda", dtype=torch.bfloat16)[:, :4096])
    with pytest.raises(ValueError, match=r"N=1001 is not a multiple of 8"):
        softmax_forward(torch.empty(4, 1001, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"weight: expected a contiguous \(4096,\) tensor"):
        rmsnorm_forward(x, w[:2048])
    with pytest.raises(ValueError, match=r"expected a 2-D \(M, N\) tensor"):
        softmax_forward(x.view(2, 2, 4096))
