"""probe-footgun-cluster-layout: a cluster layout turns a CTA-local UMMA pipeline cluster-wide.

Compile-only (sm_100a), clusters of 2 CTAs along M in both variants.
"""

from __future__ import annotations


from kernelwiki.harness.compile import Emitted, from_cute
from kernelwiki.harness.probe import Probe

from artifacts.kernels.tcgen05_gemm import tcgen05_gemm


def observe(arch: str, with_layout: bool) -> tuple[list[str], str]:
    ptx = from_cute(tcgen05_gemm.compile_for(arch, cluster_m=2, acc_pipeline_cluster_layout=with_layout), arch).ptx
    prefix = "with-layout" if with_layout else "without-layout"
    multicast = "tcgen05.commit" in ptx and "multicast::cluster" in ptx
    cluster_barrier = "barrier.cluster.arrive" in ptx
    return [f"{prefix}-multicast-commit:{'yes' if multicast else 'no'}",
            f"{prefix}-cluster-barrier:{'yes' if cluster_barrier else 'no'}"], ptx


def compile_kernel(arch: str) -> Emitted:
    without, ptx = observe(arch, False)
    with_layout, _ = observe(arch, True)
    return Emitted(arch, ptx=ptx, facts=without + with_layout)


if __name__ == "__main__":
    Probe(__file__).main(compile=compile_kernel)
