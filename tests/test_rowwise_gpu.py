"""The row-wise kernels on the GPU, beyond the probe's shapes: every op and dtype over row plans of every
kind (several rows per CTA, one CTA, clusters of 2 to 16 CTAs, column predicates), M not a multiple of
the rows per CTA, M = 1 and 0, strided rows, graph capture on a side stream, softmax on special values
against torch.softmax, the broken variants the negative controls run, and the ValueErrors for what
the kernels refuse. Skipped without an sm_90 GPU."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU", allow_module_level=True)
import torch.nn.functional as F  # noqa: E402

from artifacts.kernels.rowwise import (add_rmsnorm_forward, layernorm_forward, rmsnorm_forward,  # noqa: E402
                                       softmax_forward)

from kernelwiki.harness import gates  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = 1e-6
OPS = ("rmsnorm", "add_rmsnorm", "layernorm", "softmax")
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
NS = [256, 1000, 2928, 4096, 16288, 16384, 32768, 50000, 100000, 131072, 262144]


def _inputs(m: int, n: int, dtype, seed: int = 0, row_stride: int | None = None):
    g = torch.Generator(device="cuda").manual_seed(seed)
    stride = row_stride or n
    x = torch.randn(m, stride, device="cuda", generator=g).to(dtype)[:, :n]
    r = torch.randn(m, stride, device="cuda", generator=g).to(dtype)[:, :n]
    w = (1.0 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(dtype)
    b = (0.1 * torch.randn(n, device="cuda", generator=g)).to(dtype)
    return x, r, w, b


def _run(op: str, x, r, w, b, out=None, residual_out=None, **broken):
    """(out,) or (out, residual_out) of our kernel."""
    if op == "rmsnorm":
        return (rmsnorm_forward(x, w, out, EPS, **broken),)
    if op == "add_rmsnorm":
        return add_rmsnorm_forward(x, r, w, out, residual_out, EPS, **broken)
    if op == "layernorm":
        return (layernorm_forward(x, w, b, out, EPS, **broken),)
    return (softmax_forward(x, out, **broken),)


def _reference(op: str, x, r, w, b):
    high = torch.float64 if x.dtype == torch.float32 else torch.float32
    xf = x.to(high)
    if op == "softmax":
        return (torch.softmax(xf, dim=-1),)
    if op == "layernorm":
        return (F.layer_norm(xf, (x.shape[1],), w.to(high), b.to(high), EPS),)
    h = xf + r.to(high) if op == "add_rmsnorm" else xf
    out = h * torch.rsqrt(h.square().mean(dim=-1, keepdim=True) + EPS) * w.to(high)
    return (out, h) if op == "add_rmsnorm" else (out,)


def _check(op: str, x, r, w, b, outs):
    """Fixed bounds (a few roundings of the dtype), since a derived gate is noisy on a handful of
    elements: relative error 4 eps, and no element off by more than 8 eps of the largest output."""
    eps = torch.finfo(x.dtype).eps
    for out, ref in zip(outs, _reference(op, x, r, w, b)):
        result = gates.check(out, ref, "bf16", tol=4 * eps, max_abs_tol=float(ref.abs().max()) * 8 * eps)
        assert result["passed"], (op, result)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("m", [1, 37])
def test_every_plan_matches_the_reference(op, dtype, m, n):
    x, r, w, b = _inputs(m, n, TYPES[dtype], seed=m + n)
    outs = [gates.poison(torch.empty_like(x)) for _ in range(2)]
    _run(op, x, r, w, b, *outs)
    torch.cuda.synchronize()
    _check(op, x, r, w, b, outs)


@pytest.mark.parametrize("op", OPS)
def test_strided_rows_and_fp16(op):
    x, r, w, b = _inputs(65, 4096, torch.float16, row_stride=4096 + 64)
    outs = [gates.poison(torch.empty(65, 4096 + 8, device="cuda", dtype=torch.float16))[:, :4096] for _ in range(2)]
    _run(op, x, r, w, b, *outs)
    torch.cuda.synchronize()
    _check(op, x, r, w, b, outs)


def test_no_rows_and_an_optional_weight():
    x, r, w, b = _inputs(0, 4096, torch.bfloat16)
    assert rmsnorm_forward(x, w).shape == (0, 4096)
    x, r, w, b = _inputs(8, 4096, torch.bfloat16)
    out, h = add_rmsnorm_forward(x, r)
    torch.cuda.synchronize()
    assert torch.equal(h, x + r)
    _check("add_rmsnorm", x, r, torch.ones_like(w), b, (out, h))
    out = layernorm_forward(x, w)
    _check("layernorm", x, r, w, torch.zeros_like(b), (out,))


@pytest.mark.parametrize("op", OPS)
def test_graph_capture_on_a_side_stream(op):
    x, r, w, b = _inputs(256, 32768, torch.bfloat16)
    outs = [torch.empty_like(x) for _ in range(2)]
    _run(op, x, r, w, b, *outs)   # compile outside the capture
    stream, graph = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    for out in outs:
        gates.poison(out)
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            _run(op, x, r, w, b, *outs)
    graph.replay()
    torch.cuda.synchronize()
    _check(op, x, r, w, b, outs)


@pytest.mark.parametrize("dtype", list(TYPES))
def test_softmax_special_values_behave_as_torch(dtype):
    t = TYPES[dtype]
    big = torch.finfo(t).max
    normal = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    rows = torch.stack([torch.full((4096,), big), torch.full((4096,), -big), normal.clone().index_fill_(0, torch.tensor([9]), big),
                        torch.tensor([big, -big]).repeat(2048), torch.full((4096,), -math.inf),
                        torch.full((4096,), math.inf), normal.clone().index_fill_(0, torch.tensor([3]), -math.inf),
                        normal.clone().index_fill_(0, torch.tensor([3]), math.inf),
                        normal.clone().index_fill_(0, torch.tensor([5]), math.nan), normal]).to(t).cuda()
    expected, got = torch.softmax(rows, dim=-1), softmax_forward(rows)
    torch.cuda.synchronize()
    assert torch.equal(torch.isnan(expected), torch.isnan(got))
    finite = ~torch.isnan(expected)
    assert torch.allclose(got[finite].float(), expected[finite].float(), rtol=0, atol=4 * torch.finfo(t).eps)
    broken = softmax_forward(rows[:1], broken="scale_first")   # the first version's order
    torch.cuda.synchronize()
    assert dtype == "fp16" or torch.isnan(broken).all()


@pytest.mark.parametrize("op, broken, n", [("rmsnorm", "tile_mean", 2928), ("add_rmsnorm", "tile_mean", 2928),
                                           ("layernorm", "tile_mean", 2928), ("softmax", "zero_padding", 2928),
                                           ("rmsnorm", "eps_dropped", 4096)])
def test_the_broken_variants_fail_the_derived_gate(op, broken, n):
    x, r, w, b = _inputs(1024, n, torch.bfloat16)
    if broken == "eps_dropped":
        x, r = x * 0.004, r * 0.004      # mean(x^2) small against eps: the dropped eps shows
    outs = _run(op, x, r, w, b, broken=broken)
    torch.cuda.synchronize()
    ref = _reference(op, x, r, w, b)[0]
    library = {"rmsnorm": lambda: F.rms_norm(x, (n,), w, EPS), "add_rmsnorm": lambda: F.rms_norm(x + r, (n,), w, EPS),
               "layernorm": lambda: F.layer_norm(x, (n,), w, b, EPS), "softmax": lambda: torch.softmax(x, -1)}[op]()
    assert not gates.check(outs[0], ref, "bf16", **gates.reference_tolerance(library, ref))["passed"]


def test_refusals_name_the_value():
    x, r, w, b = _inputs(4, 4096, torch.bfloat16)
    with pytest.raises(ValueError, match=r"dtype torch.float64 unsupported"):
        softmax_forward(x.double())
    with pytest.raises(ValueError, match=r"last-dimension stride .* != 1"):
        softmax_forward(torch.empty(4096, 4, device="cuda", dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match=r"is not 16-byte aligned"):
        softmax_forward(torch.empty(4 * 4096 + 8, device="cuda", dtype=torch.bfloat16)[1:1 + 4 * 4096].view(4, 4096))
    with pytest.raises(ValueError, match=r"row stride 4100 is not a multiple of 8"):
        softmax_forward(torch.empty(4, 4100, device="cuda", dtype=torch.bfloat16)[:, :4096])
    with pytest.raises(ValueError, match=r"N=1001 is not a multiple of 8"):   # one row: no row stride to refuse first
        softmax_forward(torch.empty(1, 1001, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"N=524288 exceeds 262144"):
        rmsnorm_forward(torch.empty(1, 524288, device="cuda", dtype=torch.bfloat16), torch.empty(524288, device="cuda",
                                                                                                dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"weight: expected a contiguous \(4096,\) tensor"):
        rmsnorm_forward(x, w[:2048])
    with pytest.raises(ValueError, match=r"weight: dtype torch.float32 != x dtype torch.bfloat16"):
        layernorm_forward(x, w.float())
    with pytest.raises(ValueError, match=r"residual: shape \(4, 2048\)"):
        add_rmsnorm_forward(x, r[:, :2048])
    with pytest.raises(ValueError, match=r"weight: None"):
        rmsnorm_forward(x, None)
    with pytest.raises(ValueError, match=r"expected a 2-D \(M, N\) tensor"):
        softmax_forward(x.view(2, 2, 4096))
