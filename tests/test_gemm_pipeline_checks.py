"""The Hopper GEMMs' barrier counts are checked while the kernel is traced: a wrong count stops the compile.

The two ways the wiki's footguns get it wrong are built on purpose here (the empty barrier's count
without the CTAs that multicast into the stage; a stage's transaction bytes without one of its TMA
boxes), and each must fail the compile with a message that names the barrier and both counts."""

import pytest

cutlass = pytest.importorskip("cutlass")
import cutlass.cute as cute  # noqa: E402

from artifacts.kernels.fp8_blockscale_gemm import fp8_blockscale_gemm as fp8  # noqa: E402
from artifacts.kernels.hopper_gemm import hopper_gemm, jit, pipeline_checks  # noqa: E402
from artifacts.kernels.hopper_gemm.sm90_common import fake_tensor  # noqa: E402


def test_counts_follow_the_protocol():
    # two consumer warpgroups (8 warps), a 2x1 cluster: B comes from both CTAs of the column, A from this one
    sources = pipeline_checks.multicast_sources(multicast_a=1, multicast_b=2)
    assert sources == 2 and pipeline_checks.warp_release_arrivals(256, sources) == 16
    assert pipeline_checks.multicast_sources(1, 1) == 1 and pipeline_checks.tma_producer_arrivals(1) == 1
    assert pipeline_checks.stage_transaction_bytes((128 * 64, 16), (256 * 64, 16)) == 48 * 1024
    pipeline_checks.check("ring", 16, 16, warps=8)


def test_a_mismatch_names_the_barrier_and_both_counts():
    with pytest.raises(pipeline_checks.ArriveCountError,
                       match=r"ring empty barrier: the kernel passes 8 but the kernel facts give 16 \(warps=8, ctas=2\)"):
        pipeline_checks.check("ring empty barrier", 8, 16, warps=8, ctas=2)
    with pytest.raises(pipeline_checks.ArriveCountError, match="whole warps"):
        pipeline_checks.warp_release_arrivals(48, 1)
    with pytest.raises(pipeline_checks.ArriveCountError, match="not a compile-time integer"):
        pipeline_checks.check("ring", 1.0, 1)


class ForgetsTheMulticastPeers(hopper_gemm.HopperGemm):
    """The footgun: one arrival per consumer warp, as if no other CTA read this CTA's stages."""

    def ab_consumer_arrivals(self) -> int:
        return self.warpgroups * 4


class ForgetsTheScaleBox(fp8.Fp8BlockScaleGemm):
    """The tx-count footgun: the expected bytes of a stage without the A scales' TMA box."""

    def extra_load_boxes(self):
        return ()


def _compile_hopper(op):
    from cutlass.runtime import make_fake_stream

    bf16 = cutlass.BFloat16
    return cute.compile(op, fake_tensor(bf16, 1), fake_tensor(bf16, 1), fake_tensor(bf16, 1), cutlass.Float32(1.0),
                        cutlass.Int32(1), 66, make_fake_stream(), options="--gpu-arch sm_90a")


def _compile_fp8(op):
    from cutlass.runtime import make_fake_stream

    e4m3, f32 = cutlass.Float8E4M3FN, cutlass.Float32
    tensors = (fake_tensor(e4m3, 1, aligned=False), fake_tensor(f32, 0, aligned=False), fake_tensor(e4m3, 1, aligned=False),
               fake_tensor(f32, 1, aligned=False), fake_tensor(cutlass.BFloat16, 1, aligned=False),
               fake_tensor(cutlass.Int32, 0, rank=1, aligned=False), fake_tensor(f32, 0, rank=1, aligned=False),
               fake_tensor(cutlass.Int32, 0, rank=1, aligned=False))   # the stream-K workspace and counters
    return cute.compile(op, *tensors, cutlass.Int32(132), 132, make_fake_stream(), options="--gpu-arch sm_90a")


def test_a_wrong_consumer_count_fails_the_compile():
    with pytest.raises(Exception, match=r"ab_pipeline empty barrier \(consumer arrivals\): the kernel passes 8 but "
                                        r"the kernel facts give 16") as caught:
        _compile_hopper(ForgetsTheMulticastPeers(cluster_mn=(2, 1)))
    assert "b_multicast_ctas=2" in str(caught.value)


def test_a_wrong_transaction_count_fails_the_compile():
    with pytest.raises(Exception, match=r"ab_pipeline full barrier \(transaction bytes\): the kernel passes 33280 but "
                                        r"the kernel facts give 32768"):
        _compile_fp8(ForgetsTheScaleBox("normal", 128, (1, 1), tile_m=128))


def test_the_counts_as_built_pass():
    """Without a cluster the peers' term is 1, so the footgun's count is right there: the check must not fire."""
    _compile_hopper(ForgetsTheMulticastPeers(cluster_mn=(1, 1)))


@pytest.mark.parametrize("module", [jit, fp8], ids=["hopper_gemm", "fp8_blockscale_gemm"])
def test_the_disk_cache_key_reads_the_skeleton(module):
    """The compiled-kernel cache is keyed by the kernel's source files: each must exist (a missing one
    fails every cached compile) and the skeleton's must be among them (a change there is a new kernel)."""
    names = {path.name for path in module.KERNEL_SOURCES}
    assert all(path.is_file() for path in module.KERNEL_SOURCES), module.KERNEL_SOURCES
    assert {"gemm_base.py", "pipeline_checks.py", "sm90_common.py"} <= names
