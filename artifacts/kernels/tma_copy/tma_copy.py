"""TMA copy: move a 2-D tensor global -> shared -> global with bulk tensor copies (sm_90a+).

What it does
    out[:, :] = in[:, :] for a row-major (M, N) tensor, one (tile_m, tile_n) tile at a time.
    Warp 0 is the producer: it issues a TMA load (cp.async.bulk.tensor, global -> shared) into a
    `stages`-deep ring of shared-memory buffers; each load completes on that stage's "full"
    mbarrier, whose transaction count is the tile's byte size. Warp 1 is the consumer: it waits on
    the full barrier, issues a TMA store (shared -> global) of the same buffer, and hands the
    buffer back through the stage's "empty" mbarrier once the store has finished *reading*
    shared memory. Up to `stages - 1` stores stay in flight. The grid is persistent: CTA b copies
    tiles b, b + grid, b + 2 * grid, ...

Why it exists
    It measures how close TMA gets to the device copy ceiling for a given tile shape and pipeline
    depth (probes/probe-tma-copy), and it is the smallest complete example of the TMA + mbarrier
    producer/consumer pattern that every Hopper GEMM and attention kernel is built on.

Constraints (checked by `can_implement`)
    dtype Float32, Float16 or BFloat16; M % tile_m == 0 and N % tile_n == 0; tile_m and tile_n
    at most 256 (the TMA box limit); tile_n * element bytes a multiple of 16; the ring must fit in
    shared memory (227 KiB per block on Hopper).

Run it (on a Hopper or Blackwell GPU):
    python -m artifacts.kernels.tma_copy.tma_copy --m 16384 --n 16384 --tile 128 64 --stages 4
Compile only (any machine):
    python -m artifacts.kernels.tma_copy.tma_copy --compile-only --arch sm_90a
"""

from __future__ import annotations

import argparse
import os
import tempfile

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync

SMEM_LIMIT_BYTES = 227 * 1024
DTYPES = {"float32": cutlass.Float32, "float16": cutlass.Float16, "bfloat16": cutlass.BFloat16}
THREADS = 64  # warp 0: TMA producer, warp 1: TMA-store consumer

# --keep-ptx/--keep-cubin also write files; keep them out of the working directory.
DUMP_DIR = f"{tempfile.gettempdir()}/kernelwiki-cute-dumps"
os.makedirs(DUMP_DIR, exist_ok=True)  # the DSL names files there but does not create the directory


class TmaCopy:
    """A persistent TMA load/store copy kernel with an mbarrier ring of `stages` buffers."""

    def __init__(self, dtype: type[cutlass.Numeric], tile: tuple[int, int] = (128, 64), stages: int = 4,
                 max_ctas: int = 132, drop_last_tile: bool = False, extra_tx_bytes: int = 0,
                 elect_one_load: bool = False):
        self.dtype = dtype
        self.tile_m, self.tile_n = tile
        self.stages = stages
        self.max_ctas = max_ctas
        # Deliberately wrong variants, for the negative control and the footgun probes:
        # drop_last_tile skips the store of the last tile (part of the output is never written);
        # extra_tx_bytes announces more bytes per stage than TMA delivers (the full barrier never
        # completes); elect_one_load wraps the TMA load in an explicit elect_one().
        self.drop_last_tile = drop_last_tile
        self.extra_tx_bytes = extra_tx_bytes
        self.elect_one_load = elect_one_load

    @staticmethod
    def can_implement(dtype: type[cutlass.Numeric], m: int, n: int, tile: tuple[int, int], stages: int) -> None:
        """Raise ValueError naming the offending value and what is supported."""
        if dtype not in DTYPES.values():
            raise ValueError(f"dtype {dtype} is not supported; use one of {sorted(DTYPES)}")
        tile_m, tile_n = tile
        for name, size in (("tile_m", tile_m), ("tile_n", tile_n)):
            if not 1 <= size <= 256:
                raise ValueError(f"{name}={size}: a TMA box dimension must be in 1..256")
        if tile_n * dtype.width // 8 % 16:
            raise ValueError(f"tile_n={tile_n}: the inner box must span a multiple of 16 bytes "
                             f"({tile_n} x {dtype.width // 8} B = {tile_n * dtype.width // 8} B)")
        if m % tile_m or n % tile_n:
            raise ValueError(f"shape ({m}, {n}) is not a multiple of the tile ({tile_m}, {tile_n})")
        ring = stages * tile_m * tile_n * dtype.width // 8
        if not 2 <= stages or ring > SMEM_LIMIT_BYTES - 1024:
            raise ValueError(f"stages={stages}: needs 2 or more stages and a ring of at most "
                             f"{SMEM_LIMIT_BYTES - 1024} B (this one is {ring} B)")

    @cute.jit
    def __call__(self, mIn: cute.Tensor, mOut: cute.Tensor, stream):
        # mIn, mOut: (M, N) row-major, same dtype
        smem_layout = cute.make_layout((self.tile_m, self.tile_n), stride=(self.tile_n, 1))
        smem_layout_staged = cute.make_layout(
            (self.tile_m, self.tile_n, self.stages), stride=(self.tile_n, 1, self.tile_m * self.tile_n))
        tma_load, gIn = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mIn, smem_layout, (self.tile_m, self.tile_n))
        tma_store, gOut = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mOut, smem_layout, (self.tile_m, self.tile_n))

        @cute.struct
        class SharedStorage:
            barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            ring: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(smem_layout_staged)], 1024]

        self.shared_storage = SharedStorage
        tiles_n = cute.size(mIn, mode=[1]) // self.tile_n
        num_tiles = cute.size(mIn, mode=[0]) // self.tile_m * tiles_n
        grid = cutlass.min(num_tiles, self.max_ctas)
        self.kernel(tma_load, gIn, tma_store, gOut, smem_layout, smem_layout_staged, num_tiles, tiles_n).launch(
            grid=[grid, 1, 1], block=[THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, tma_load: cute.CopyAtom, gIn: cute.Tensor, tma_store: cute.CopyAtom, gOut: cute.Tensor,
               smem_layout: cute.Layout, smem_layout_staged: cute.Layout, num_tiles: cutlass.Int32,
               tiles_n: cutlass.Int32):
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        bidx, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        if warp_idx == 0:
            cpasync.prefetch_descriptor(tma_load)
            cpasync.prefetch_descriptor(tma_store)

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 1),  # one consumer warp
            tx_count=cute.size_in_bytes(self.dtype, smem_layout) + self.extra_tx_bytes,
        )
        # sRing: (tile_m, tile_n, stages)
        sRing = storage.ring.get_tensor(smem_layout_staged)
        # Tiles of the TMA views: (tile_m, tile_n), ((tiles_m, tiles_n))
        gIn_tiles = cute.zipped_divide(gIn, (self.tile_m, self.tile_n))
        gOut_tiles = cute.zipped_divide(gOut, (self.tile_m, self.tile_n))
        # tLsRing: (TMA, stages); tLgIn: (TMA, (tiles_m, tiles_n))
        tLsRing, tLgIn = cpasync.tma_partition(
            tma_load, 0, cute.make_layout(1), cute.group_modes(sRing, 0, 2), gIn_tiles)
        tSsRing, tSgOut = cpasync.tma_partition(
            tma_store, 0, cute.make_layout(1), cute.group_modes(sRing, 0, 2), gOut_tiles)

        if warp_idx == 0:
            produce = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
            for tile in cutlass.range(bidx, num_tiles, grid, unroll=1):
                ring.producer_acquire(produce)
                if cutlass.const_expr(self.elect_one_load):
                    with cute.arch.elect_one():
                        cute.copy(tma_load, tLgIn[(None, (tile // tiles_n, tile % tiles_n))],
                                  tLsRing[(None, produce.index)], tma_bar_ptr=ring.producer_get_barrier(produce))
                else:
                    cute.copy(tma_load, tLgIn[(None, (tile // tiles_n, tile % tiles_n))],
                              tLsRing[(None, produce.index)], tma_bar_ptr=ring.producer_get_barrier(produce))
                ring.producer_commit(produce)
                produce.advance()

        if warp_idx == 1:
            consume = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            in_flight = cutlass.Int32(0)
            for tile in cutlass.range(bidx, num_tiles, grid, unroll=1):
                ring.consumer_wait(consume)
                store = True
                if cutlass.const_expr(self.drop_last_tile):
                    store = tile != num_tiles - 1
                if store:
                    cute.copy(tma_store, tSsRing[(None, consume.index)],
                              tSgOut[(None, (tile // tiles_n, tile % tiles_n))])
                cute.arch.cp_async_bulk_commit_group()
                consume.advance()
                in_flight += 1
                # Hand a buffer back only once its store has finished reading shared memory.
                if in_flight == self.stages - 1:
                    cute.arch.cp_async_bulk_wait_group(self.stages - 2, read=True)
                    cute.arch.sync_warp()
                    ring.consumer_release(release)
                    release.advance()
                    in_flight -= 1
            # Every store must complete before the block exits and its shared memory is reused.
            cute.arch.cp_async_bulk_wait_group(0, read=False)


def compile_for(arch: str | None, dtype_name: str = "float32", m: int = 4096, n: int = 4096,
                tile: tuple[int, int] = (128, 64), stages: int = 4, drop_last_tile: bool = False):
    """Compile with fake tensors (no GPU needed); the result carries __ptx__ and __cubin__.
    arch=None leaves the target to the DSL's own default."""
    from cutlass.cute.runtime import make_fake_compact_tensor
    from cutlass.runtime import make_fake_stream

    dtype = DTYPES[dtype_name]
    TmaCopy.can_implement(dtype, m, n, tile, stages)
    fake_in = make_fake_compact_tensor(dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    fake_out = make_fake_compact_tensor(dtype, (m, n), stride_order=(1, 0), assumed_align=16)
    op = TmaCopy(dtype, tile, stages, drop_last_tile=drop_last_tile)
    target = f"--gpu-arch {arch} " if arch else ""
    return cute.compile(op, fake_in, fake_out, make_fake_stream(), options=f"{target}--keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, default=16384)
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--tile", type=int, nargs=2, default=(128, 64))
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--arch", default="sm_90a")
    args = parser.parse_args()
    if args.compile_only:
        compile_for(args.arch, args.dtype, args.m, args.n, tuple(args.tile), args.stages)
        print(f"compiled for {args.arch}")
        return
    import torch
    from cutlass.cute.runtime import from_dlpack

    src = torch.randn(args.m, args.n, device="cuda", dtype=getattr(torch, args.dtype))
    dst = torch.full_like(src, float("nan"))
    TmaCopy.can_implement(DTYPES[args.dtype], args.m, args.n, tuple(args.tile), args.stages)
    op = TmaCopy(DTYPES[args.dtype], tuple(args.tile), args.stages,
                 max_ctas=torch.cuda.get_device_properties(0).multi_processor_count)
    compiled = cute.compile(op, from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16),
                            cutlass.cuda.default_stream())
    compiled(from_dlpack(src, assumed_align=16), from_dlpack(dst, assumed_align=16), cutlass.cuda.default_stream())
    torch.cuda.synchronize()
    print("exact copy:", torch.equal(src, dst))


if __name__ == "__main__":
    main()
