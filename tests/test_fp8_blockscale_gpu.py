"""Our block-scaled FP8 GEMM on the GPU beyond the probe's cases: stream-K (odd M, N and K, few and many
CTAs per tile, one CTA, views, bit-identical run to run and across CUDA-graph replays, which also shows
that the tile counters are left at zero), short A (decode stages of 16 or 32 rows of A), each against
the FP32 reference under the probe's rounding gate, the default choice (the chooser's, at decode and
mid sizes), and the data-parallel paths the probe also runs (M = 1, the grouped layouts). Skipped
without an sm_90 GPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass")
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("needs an sm_90 GPU", allow_module_level=True)
from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as kernel, quantize

pytestmark = pytest.mark.gpu
ROUNDING_FACTOR = 1.25   # the probe's gate: relative error <= this x the bf16 rounding error of the exact result


def _operands(lead: tuple, m: int, n: int, k: int, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, sfa = quantize.per_token_cast(torch.randn(*lead, m, k, device="cuda", generator=g))
    b, sfb = quantize.per_block_cast(torch.randn(*lead, n, k, device="cuda", generator=g))
    return a, sfa, b, sfb


def _check(d, ref):
    assert not torch.isnan(d).any(), "unwritten output"
    ref64 = ref.double()
    err = ((d.double() - ref64).norm() / ref64.norm()).item()
    gate = ROUNDING_FACTOR * ((ref.bfloat16().double() - ref64).norm() / ref64.norm()).item()
    assert err <= gate, f"relative error {err:.3e} > {gate:.3e}"


def _repeats_bit_for_bit(run, d, times: int = 3) -> None:
    """Eager launches and CUDA-graph replays all give the first launch's bits."""
    first = d.clone()
    for _ in range(times):
        run()
    assert torch.equal(d, first)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(times):
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(d, first)


@pytest.mark.parametrize("m, n, k, tile, ctas", [
    (1, 8, 128, (64, 32), None),          # one unit: one CTA, nothing shared
    (1, 4096, 7168, (64, 128), None),
    (3, 64, 128, (64, 64), 132),          # more CTAs asked than units
    (7, 200, 384, (64, 64), 5),           # partial tiles, 3 K tiles, pieces of every length
    (16, 256, 256, (64, 128), 4),         # every tile in two pieces of one K tile
    (16, 18432, 7168, (64, 128), None),
    (24, 2120, 1024, (64, 32), 7),
    (33, 1000, 2048, (64, 64), None),     # rows in three warp bands
    (64, 2112, 7168, (64, 64), None),
    (100, 4096, 640, (128, 128), 3),      # two consumer warpgroups, few CTAs, long runs
    (128, 7168, 2048, (128, 64), None),
    (5, 576, 7168, (64, 32), None),
])
def test_streamk(m, n, k, tile, ctas):
    a, sfa, b, sfb = _operands((), m, n, k, seed=m + n)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, tile_m=tile[0], tile_n=tile[1], cluster_mn=(1, 1), streamk=True,
                                 ctas=ctas)
    assert run.tiling["streamk"]
    d.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    _check(d, quantize.reference(a, sfa, b, sfb))
    _repeats_bit_for_bit(run, d)
    assert not run.workspace[1].any(), "a tile counter was left non-zero"


@pytest.mark.parametrize("m, n, k, a_rows, tile_n, streamk", [
    (1, 8, 128, 16, 32, False), (5, 200, 384, 16, 64, True), (16, 4096, 7168, 16, 128, True),
    (16, 1024, 1024, 16, 128, False), (17, 2120, 1024, 32, 64, True), (32, 18432, 1536, 32, 128, False),
    (24, 576, 7168, 32, 32, True)])
def test_short_a(m, n, k, a_rows, tile_n, streamk):
    """A stage of a_rows rows (decode): the wgmmas read 64 rows, those past a_rows from whatever follows
    in shared memory; only rows past M see it, and D's rows are right."""
    a, sfa, b, sfb = _operands((), m, n, k, seed=m * 7 + n)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, tile_m=64, tile_n=tile_n, cluster_mn=(1, 1), streamk=streamk,
                                 a_rows=a_rows)
    assert run.tiling["a_rows"] == a_rows
    d.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    _check(d, quantize.reference(a, sfa, b, sfb))
    _repeats_bit_for_bit(run, d, times=2)


def test_short_a_refuses_more_rows():
    a, sfa, b, sfb = _operands((), 17, 256, 256)
    with pytest.raises(ValueError, match="a_rows=16 with M=17"):
        kernel.compile_gemm(a, sfa, b, sfb, tile_m=64, tile_n=64, cluster_mn=(1, 1), a_rows=16)


def test_streamk_on_views_and_beside_data_parallel():
    """Strided operands (rows longer than K, bases 16 bytes in); stream-K's D differs from the
    data-parallel kernel's only by where FP32 sums are split: by one bf16 step at most, or, where the
    sum nearly cancels, by the FP32 rounding of the partial sums (bounded here by 1e-5 of the largest)."""
    m, n, k = 24, 2048, 3072
    a, sfa, b, sfb = _operands((), m, n, k, seed=3)
    big_a = torch.empty(m, k + 144, dtype=a.dtype, device="cuda")
    big_b = torch.empty(n, k + 144, dtype=b.dtype, device="cuda")
    va, vb = big_a[:, 16:16 + k], big_b[:, 16:16 + k]
    va.copy_(a)
    vb.copy_(b)
    run, d = kernel.compile_gemm(va, sfa, vb, sfb, tile_m=64, tile_n=64, cluster_mn=(1, 1), streamk=True)
    run()
    plain, d_plain = kernel.compile_gemm(a, sfa, b, sfb, tile_m=64, tile_n=64, cluster_mn=(1, 1), streamk=False)
    plain()
    torch.cuda.synchronize()
    ref = quantize.reference(a, sfa, b, sfb)
    _check(d, ref)
    step = d_plain.float().abs() * 2 ** -7 + 1e-5 * ref.abs().max()   # one bf16 step, or FP32 rounding near 0
    assert ((d.float() - d_plain.float()).abs() <= step).all()


@pytest.mark.parametrize("m, n, k", [(16, 7168, 18432), (24, 24576, 1536), (1, 576, 7168), (200, 7168, 18432)])
def test_default_choice_is_the_choosers_and_correct(m, n, k):
    a, sfa, b, sfb = _operands((), m, n, k, seed=5)
    run, d = kernel.compile_gemm(a, sfa, b, sfb)
    chosen = kernel.choose_tiling("normal", m, n, torch.cuda.get_device_properties(0).multi_processor_count, k=k)
    assert {key: run.tiling[key] for key in chosen} == chosen
    run()
    torch.cuda.synchronize()
    _check(d, quantize.reference(a, sfa, b, sfb))


@pytest.mark.parametrize("m, n, k", [(1, 8, 128), (1, 4096, 7168), (320, 2120, 1024), (4096, 2112, 7168)])
def test_data_parallel_normal(m, n, k):
    a, sfa, b, sfb = _operands((), m, n, k, seed=m)
    run, d = kernel.compile_gemm(a, sfa, b, sfb, streamk=False)
    d.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    _check(d, quantize.reference(a, sfa, b, sfb))


def test_grouped_layouts():
    """Masked with empty, partial and one-row groups; contiguous with padding rows left unwritten."""
    a, sfa, b, sfb = _operands((3,), 256, 1024, 1024, seed=7)
    counts = torch.tensor([0, 131, 1], dtype=torch.int32, device="cuda")
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "masked", counts)
    d.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    ref = quantize.reference(a, sfa, b, sfb, "masked")
    _check(torch.cat([d[1, :131], d[2, :1]]), torch.cat([ref[1, :131], ref[2, :1]]))
    g = torch.Generator(device="cuda").manual_seed(8)
    a, sfa = quantize.per_token_cast(torch.randn(512, 1024, device="cuda", generator=g))
    b, sfb = quantize.per_block_cast(torch.randn(2, 1024, 1024, device="cuda", generator=g))
    index = torch.tensor([0] * 128 + [-1] * 128 + [1] * 256, dtype=torch.int32, device="cuda")
    run, d = kernel.compile_gemm(a, sfa, b, sfb, "contiguous", index)
    d.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    keep = index >= 0
    _check(d[keep], quantize.reference(a, sfa, b, sfb, "contiguous", index)[keep])
    assert torch.isnan(d[~keep]).all()
