"""The ping-pong schedule of our Hopper GEMM without a GPU: what can_implement refuses, that it compiles
for sm_90a in every tile width and cluster it supports, that its SASS holds the ordered barriers
(bar.sync / bar.arrive over both consumer warpgroups' 256 threads) and the default does not, and that
its barrier counts are checked while it is traced."""

from __future__ import annotations

import re

import pytest

cutlass = pytest.importorskip("cutlass")
from artifacts.kernels.hopper_gemm import config, gemm_base, hopper_gemm, pipeline_checks  # noqa: E402
from kernelwiki.harness import compile as compile_mod  # noqa: E402

BF16, FP16 = cutlass.BFloat16, cutlass.Float16
# a named barrier of both consumer warpgroups (0x100 = 256 threads), its id in a register (the
# warpgroup's own barrier is id + warpgroup)
ORDER_WAIT = re.compile(r"BAR\.SYNC(\.DEFER_BLOCKING)? R\d+, 0x100\b")
ORDER_SIGNAL = re.compile(r"BAR\.ARV R\d+, 0x100\b")


def _sass(**kwargs) -> str | None:
    return compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **kwargs), "sm_90a").sass


def _pingpong(**kwargs) -> dict:
    return {"tile_m": 64, "schedule": "pingpong", **kwargs}


@pytest.mark.parametrize("kwargs, message", [
    (dict(schedule="pingpong", ab_dtype=cutlass.Float8E4M3FN), r"schedule='pingpong' with A/B dtype Float8E4M3FN"),
    (dict(schedule="pingpong", ab_dtype=cutlass.TFloat32, d_dtype=cutlass.Float32),
     r"schedule='pingpong' with A/B dtype TFloat32"),
    (dict(schedule="pingpong", tile_m=128), r"schedule='pingpong' with tile_m=128 unsupported.*use tile_m=64"),
    (dict(schedule="pingpong", tile_m=64, split_k=2), r"schedule='pingpong' with split_k=2 unsupported"),
    (dict(schedule="round-robin"), r"schedule='round-robin' unsupported; use one of \('cooperative', 'pingpong'\)"),
])
def test_can_implement_refuses_what_pingpong_does_not_support(kwargs, message):
    args = {"ab_dtype": BF16, "d_dtype": BF16, "m": 256, "n": 256, "k": 256, **kwargs}
    with pytest.raises(ValueError, match=message):
        hopper_gemm.HopperGemm.can_implement(**args)


def test_can_implement_accepts_pingpong_shapes_and_the_default_is_cooperative():
    for m, n, k in ((1, 256, 64), (2, 264, 136), (4000, 2104, 7000)):
        hopper_gemm.HopperGemm.can_implement(BF16, BF16, m, n, k, tile_m=64, schedule="pingpong")
    assert hopper_gemm.GemmConfig().schedule == "cooperative" and hopper_gemm.HopperGemm().schedule == "cooperative"
    assert hopper_gemm.GemmConfig(64, 256, (2, 1), schedule="pingpong").describe() == \
        "tile 64x256, cluster 2x1, split-k 1, ping-pong"
    assert hopper_gemm.GemmConfig().describe() == "tile 128x256, cluster 2x1, split-k 1"   # records' text unchanged
    with pytest.raises(ValueError, match=r"schedule='pingpong' with tile_m=128 and A/B dtype BFloat16 unsupported: "
                                         r".*'pingpong' needs tile_m=64"):
        hopper_gemm.HopperGemm(tile_m=128, schedule="pingpong")


def test_pingpong_shape_of_the_work():
    """Two consumer warpgroups (384 threads), each alone on a 64-row tile: a stage is read, and
    released, by one warpgroup's four warps from each CTA that filled it."""
    op = hopper_gemm.HopperGemm(BF16, BF16, tile_n=256, cluster_mn=(2, 1), tile_m=64, schedule="pingpong")
    assert (op.warpgroups, op.tile_warpgroups(), op.threads, op.tile_mnk[0], op.epi_tile) == (2, 1, 384, 64, (64, 32))
    assert op.ab_consumer_arrivals() == 4 * 2
    cooperative = hopper_gemm.HopperGemm(BF16, BF16, tile_n=256, cluster_mn=(2, 1))
    assert (cooperative.tile_warpgroups(), cooperative.ab_consumer_arrivals()) == (2, 16)


@pytest.mark.parametrize("tile_n", config.TILE_NS)
@pytest.mark.parametrize("cluster_mn", [(1, 1), (2, 1)], ids=["1x1", "2x1"])
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_pingpong_compiles_with_ordered_barriers_and_no_spills(tile_n, cluster_mn, dtype):
    sass = _sass(**_pingpong(tile_n=tile_n, cluster_mn=cluster_mn, ab_dtype=dtype, d_dtype=dtype))
    if sass is None:
        pytest.skip("no nvdisasm")
    # nvdisasm names the bf16 form HGMMA...F32.BF16 and the fp16 one plain HGMMA...F32
    assert re.search(rf"HGMMA\.64x{tile_n}x16\.F32{'.BF16' if dtype is BF16 else ''} ", sass)
    assert ORDER_WAIT.search(sass) and ORDER_SIGNAL.search(sass)
    assert not re.search(r"\b(STL|LDL)\b", sass)   # 64 x tile_n fp32 per warpgroup fits its registers


def test_pingpong_compiles_for_views_and_fp32_output():
    for kwargs in (dict(a_major="mn", b_major="mn"), dict(d_dtype=cutlass.Float32, tile_n=128),
                   dict(m=1, n=264, k=136, cluster_mn=(1, 1))):
        sass = _sass(**_pingpong(**kwargs))
        if sass is not None:
            assert ORDER_WAIT.search(sass) and not re.search(r"\b(STL|LDL)\b", sass)


def test_the_default_schedule_has_no_order_barriers():
    sass = _sass()
    if sass is None:
        pytest.skip("no nvdisasm")
    assert "HGMMA.64x256x16" in sass and not ORDER_WAIT.search(sass) and not ORDER_SIGNAL.search(sass)


def test_order_barrier_count_follows_the_protocol():
    assert pipeline_checks.ordered_barrier_threads(128, 2) == 256
    with pytest.raises(pipeline_checks.ArriveCountError, match="at least two warpgroups"):
        pipeline_checks.ordered_barrier_threads(128, 1)
    # the order barriers stay clear of the ids a specialization numbers from FIRST_FREE (the FP8 GEMM's turns)
    ids = {int(gemm_base.NamedBarrier.MMA_ORDER) + w for w in (0, 1)} | \
        {int(gemm_base.NamedBarrier.EPILOGUE_ORDER) + w for w in (0, 1)}
    assert len(ids) == 4 and max(ids) <= 15 and min(ids) > int(gemm_base.NamedBarrier.FIRST_FREE) + 1


def test_an_order_barrier_counting_one_warpgroup_fails_the_compile(monkeypatch):
    """The footgun: bar.sync counting only the waiting warpgroup (128) would release it without the
    other's bar.arrive, so the two mainloops would overlap instead of taking turns."""
    monkeypatch.setattr(gemm_base.WarpgroupOrder, "THREADS", 128)
    with pytest.raises(Exception, match=r"order barriers 12, 13 \(threads\): the kernel passes 128 but the kernel "
                                        r"facts give 256"):
        hopper_gemm.compile_for("sm_90a", **_pingpong(tile_n=128, cluster_mn=(1, 1)))


class CountsBothWarpgroupsPerStage(hopper_gemm.HopperGemm):
    """The ping-pong arrive-count footgun: the empty barrier expecting both consumer warpgroups' warps,
    as in the cooperative schedule, though only one warpgroup reads each stage (it would hang)."""

    def ab_consumer_arrivals(self) -> int:
        cluster_m, cluster_n = self.cluster_mn
        return (cluster_m + cluster_n - 1) * self.warpgroups * 4


def test_a_cooperative_count_in_pingpong_fails_the_compile():
    from cutlass.runtime import make_fake_stream
    import cutlass.cute as cute
    from artifacts.kernels.hopper_gemm.sm90_common import fake_tensor

    op = CountsBothWarpgroupsPerStage(BF16, BF16, tile_n=128, cluster_mn=(2, 1), tile_m=64, schedule="pingpong")
    with pytest.raises(Exception, match=r"ab_pipeline empty barrier \(consumer arrivals\): the kernel passes 16 but "
                                        r"the kernel facts give 8"):
        cute.compile(op, fake_tensor(BF16, 1), fake_tensor(BF16, 1), fake_tensor(BF16, 1), cutlass.Float32(1.0),
                     cutlass.Int32(1), 66, make_fake_stream(), options="--gpu-arch sm_90a")


def test_hand_overs_sit_where_the_overlap_and_the_shared_buffers_need_them():
    """In the PTX of the consumer loop: the mainloop's hand-over (bar.arrive over 256 threads) comes
    after the last wgmma is issued and before wgmma.wait_group 0 (handing over after the wait would
    serialize the two mainloops' tails); the epilogue's hand-over comes after the TMA stores have read
    the D buffers (cp.async.bulk.wait_group.read 0), which the other warpgroup overwrites next."""
    ptx = compile_mod.from_cute(hopper_gemm.compile_for("sm_90a", **_pingpong(tile_n=128, cluster_mn=(1, 1))),
                                "sm_90a").ptx
    events = [(m.start(), m.group(0)) for m in re.finditer(
        r"bar\.arrive %r\d+, 256|bar\.sync \t?%r\d+, 256|wgmma\.mma_async|wgmma\.wait_group\.sync\.aligned \t?\d|"
        r"cp\.async\.bulk\.wait_group\.read \t?0", ptx)]
    kinds = [re.sub(r"%r\d+|\t", "", text) for _, text in events]
    arrives = [i for i, kind in enumerate(kinds) if kind.startswith("bar.arrive")]
    assert len(arrives) == 2, kinds
    mma_hand_over, epilogue_hand_over = arrives
    assert "wgmma.mma_async" in kinds[:mma_hand_over]
    assert kinds[mma_hand_over - 1] in ("wgmma.mma_async", "wgmma.wait_group.sync.aligned 1")   # the K loop
    assert kinds[mma_hand_over + 1] == "wgmma.wait_group.sync.aligned 0"
    assert kinds[epilogue_hand_over - 1] == "cp.async.bulk.wait_group.read 0"
