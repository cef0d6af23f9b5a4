"""Compiling our Hopper GEMM: one kernel per compile-time configuration, with dynamic shapes.

_compile builds HopperGemm (gemm_sm90.py) for fake tensors whose extents and strides are run-time
values, so one compiled kernel serves every shape, stride and split_k of its configuration;
kernel_for keeps it in memory and on disk (sm90_common.cached_kernel: a new process loads the object
file instead of compiling); precompile fills the disk cache from several processes at once;
compile_for compiles with PTX and cubin kept, without a GPU (the compile tests and probes scan them).
"""

from __future__ import annotations

import json
from pathlib import Path

import cutlass
import cutlass.cute as cute

from . import fused_epilogue
from .config import GemmConfig
from .fused_epilogue import EpilogueSpec
from .gemm_sm90 import D_MAJOR_MODE, MAJOR_MODE, HopperGemm
from .sm90_common import DUMP_DIR, cached_kernel, fake_tensor, max_active_clusters


def _compile(ab_dtype, d_dtype, a_major: str, b_major: str, config: GemmConfig, clusters: int, arch: str | None,
             variant: tuple = (), d_major: str = "n"):
    """One kernel: config's tiles, cluster, swizzle and schedule, D's major mode; split_k > 1 compiles
    the kernel that reduces its splits inside (any split_k at run time), split_k = 1 the one without."""
    from cutlass.runtime import make_fake_stream

    reduce_splits = config.split_k > 1
    op = HopperGemm(ab_dtype, d_dtype, config.tile_n, config.cluster_mn, config.swizzle, tile_m=config.tile_m,
                    schedule=config.schedule, d_major=d_major, reduce_splits=reduce_splits, **dict(variant))
    options = f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}" if arch else ""
    split_operands = (fake_tensor(cutlass.Float32, 0, rank=1), fake_tensor(cutlass.Int32, 0, rank=1)) \
        if reduce_splits else ()
    return cute.compile(op, fake_tensor(ab_dtype, MAJOR_MODE[a_major]), fake_tensor(ab_dtype, MAJOR_MODE[b_major]),
                        fake_tensor(d_dtype, D_MAJOR_MODE[d_major]), cutlass.Float32(1.0), cutlass.Int32(1), clusters,
                        make_fake_stream(), *_fake_epilogue_operands(op.epilogue, d_dtype, reduce_splits),
                        *split_operands, options=options)


def _fake_epilogue_operands(spec: EpilogueSpec, d_dtype, split: bool = False) -> tuple:
    """(mBias, mC, beta, quant) as a fused kernel is compiled for them: bias (N,) and the residual
    (M, N, L), N contiguous, both of D's type (bf16 for an e4m3 D), all four passed whatever the spec
    uses (stand-ins for the unused ones: one signature per fused kernel, no None slots in the exported
    object); none for the plain epilogue (its signature is unchanged) unless it splits K (`split`: the
    split-K operands come after these four)."""
    if not (spec.fused or split):
        return ()
    operand = fused_epilogue.operand_dtype(d_dtype)
    return fake_tensor(operand, 0, rank=1), fake_tensor(operand, 1), cutlass.Float32(1.0), cutlass.Float32(1.0)


def compile_for(arch: str = "sm_90a", m: int = 1024, n: int = 1024, k: int = 1024, ab_dtype=cutlass.BFloat16,
                d_dtype=cutlass.BFloat16, tile_n: int = 256, cluster_mn=(2, 1), sms: int = 132, a_major: str = "k",
                b_major: str = "k", tile_m: int = 128, schedule: str = "cooperative", split_k: int = 1,
                d_major: str = "n", **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin. Shapes are dynamic; m, n, k
    only go through can_implement; split_k > 1 compiles the in-kernel split-K reduction (the kernel
    serves every split_k); d_major='m': D stored M-major (the swap-AB kernel)."""
    HopperGemm.can_implement(ab_dtype, d_dtype, m, n, k, tile_n, cluster_mn, a_major, b_major, tile_m, split_k,
                             schedule=schedule, epilogue=variant.get("epilogue", EpilogueSpec()), d_major=d_major)
    config = GemmConfig(tile_m, tile_n, tuple(cluster_mn), split_k, schedule=schedule)
    return _compile(ab_dtype, d_dtype, a_major, b_major, config, sms // (cluster_mn[0] * cluster_mn[1]), arch,
                    tuple(sorted(variant.items())), d_major)


KERNEL_SOURCES = [Path(__file__).resolve().parent / name
                  for name in ("gemm_sm90.py", "gemm_base.py", "tile_scheduler.py", "config.py", "jit.py",
                               "pipeline_checks.py", "sm90_common.py", "tf32_mma.py", "fused_epilogue.py")]
"""What a compiled kernel depends on: a change in any of them compiles (and tunes) again."""


def kernel_for(ab_dtype, d_dtype, a_major: str, b_major: str, config: GemmConfig, variant: tuple = (),
               d_major: str = "n"):
    """The compiled kernel for one configuration (shapes and split_k are run-time values: one kernel
    without a split, one with the in-kernel reduction for every split_k > 1), through the shared cache:
    in memory, on disk, or compiled now."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    clusters = max_active_clusters(config.cluster_mn)
    config = GemmConfig(config.tile_m, config.tile_n, config.cluster_mn, min(config.split_k, 2), config.swizzle,
                        config.schedule)
    key = ("hopper_gemm", str(ab_dtype), str(d_dtype), a_major, b_major, d_major, config, clusters,
           f"sm_{props.major}{props.minor}", variant)
    return cached_kernel(key, lambda: _compile(ab_dtype, d_dtype, a_major, b_major, config, clusters, None, variant,
                                               d_major), KERNEL_SOURCES)


def precompile(jobs: list[tuple], workers: int = 8, timeout_s: float = 300.0) -> list[str]:
    """Compile kernels into the disk cache in `workers` processes at once, so that kernel_for later loads
    them instead of compiling one after another: each job is (A/B type name, D type name, a_major,
    b_major, GemmConfig, d_major), type names as cutlass spells them ("BFloat16"). Returns the errors
    the workers printed (a job that failed is compiled again, in-process, when it is used)."""
    import subprocess
    import sys
    import tempfile

    shares = [jobs[i::workers] for i in range(max(1, min(workers, len(jobs))))]
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for i, share in enumerate(shares):
            path = Path(tmp) / f"jobs{i}.json"
            path.write_text(json.dumps([[ab, d, am, bm, [c.tile_m, c.tile_n, list(c.cluster_mn), c.split_k], dm]
                                        for ab, d, am, bm, c, dm in share]))
            procs.append(subprocess.Popen([sys.executable, "-m", "artifacts.kernels.hopper_gemm.jit", "--precompile",
                                           str(path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        errors = []
        for proc in procs:
            try:
                output, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
                errors.append(f"a precompile worker ran past {timeout_s} s")
            errors += [line for line in output.splitlines() if line.startswith("PRECOMPILE-ERROR")]
    return errors


def _precompile_worker(path: str) -> None:
    """Compile each job of the JSON file `path` (precompile's format) into the disk cache."""
    import torch

    torch.zeros(1, device="cuda")   # a CUDA context before the cluster-occupancy query
    for ab, d, a_major, b_major, (tile_m, tile_n, cluster, split), d_major in json.loads(Path(path).read_text()):
        try:
            kernel_for(getattr(cutlass, ab), getattr(cutlass, d), a_major, b_major,
                       GemmConfig(tile_m, tile_n, tuple(cluster), split), (), d_major)
        except Exception as err:   # noqa: BLE001  (reported; the job compiles again where it is used)
            print(f"PRECOMPILE-ERROR {tile_m}x{tile_n} {cluster} s{split} D{d_major}: {type(err).__name__}: {err}"[:300],
                  flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="compile kernels into the disk cache (precompile's worker)")
    parser.add_argument("--precompile", required=True, help="a JSON file of jobs")
    _precompile_worker(parser.parse_args().precompile)
