"""Which K tiles each work tile of our Hopper GEMM covers, and how the splits of one output tile meet.

The persistent walk itself (gemm_base.Sm90GemmBase.make_scheduler: a static schedule over the work
tiles (m, n, l), cluster by cluster) is shared with the FP8 GEMM; this module holds what HopperGemm
adds to it. Split-K (split_k > 1): work tile l = batch * split_k + s covers the s-th of split_k
contiguous ranges of the K tiles, and the splits of one output tile are reduced inside the same
launch (reduce_partials): each stores its FP32 partial to a workspace (config.split_workspace sizes
it) and counts itself on the tile's counter; the last to arrive sums the partials in the fixed order
0 .. split_k - 1 (the same bits every run) and runs the epilogue. Nothing waits on another CTA.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


class SplitKTiles:
    """HopperGemm's K ranges and split-K reduction (a mixin: it reads tile_mnk and the negative
    controls skip_last_k_tile and skip_last_slice from the kernel)."""

    @cute.jit
    def _k_range(self, tile_m, tile_n, tile_l, k_tiles, per_split, split_k):
        """(batch index, first K tile, number of K tiles) of work tile (tile_m, tile_n, l), l = batch * split_k + s."""
        batch = tile_l // split_k
        first = (tile_l % split_k) * per_split
        count = cutlass.max(0, cutlass.min(k_tiles - first, per_split))
        if cutlass.const_expr(self.skip_last_k_tile):
            # 1 for tile (0, 0) of the first batch in its last K range, else 0 (integer arithmetic:
            # the same branch-free count in the producer and the consumers)
            first_tile = 1 - cutlass.min(1, tile_m + tile_n + batch)
            last_range = 1 - cutlass.min(1, split_k - 1 - tile_l % split_k)
            count = count - first_tile * last_range
        return batch, first, count

    def partial_slice(self, mPartials: cute.Tensor, tile, split, split_k) -> cute.Tensor:
        """Split `split`'s FP32 partial of output tile `tile` (its index in split_workspace's order): a
        whole (tile_m, tile_n) row-major block, so the rows past D's M exist and need no bounds."""
        tile_elems = self.tile_mnk[0] * self.tile_mnk[1]
        offset = (cutlass.Int64(tile) * split_k + split) * tile_elems
        return cute.make_tensor(mPartials.iterator + offset,
                                cute.make_layout((self.tile_mnk[0], self.tile_mnk[1]), stride=(self.tile_mnk[1], 1)))

    @cute.jit
    def reduce_partials(self, split_inputs, thr_mma, rAcc, epilogue_barrier, consumer_tidx, gD, tile_m, tile_n, batch,
                        split, split_k, rows):
        """Split-K inside the kernel, deterministic, nothing waiting on another CTA. Each split stores its
        partial (rAcc, the rows inside D's `rows`) to its slice, fences (release, gpu scope) and, once
        every consumer thread has (the named barrier), one thread adds 1 to the tile's counter (acq_rel)
        and publishes through shared memory whether it was the last of split_k. The last reads
        the slices in the fixed order 0 .. split_k - 1 (after an acquire fence, with ld.global.cg: from
        L2, not a stale L1) into rAcc, resets the counter to 0 for the next launch (every split has
        arrived) and returns 1: its caller runs the epilogue. The others return 0."""
        mPartials, mCounters, flag = split_inputs
        tiles_m, tiles_n = cute.size(gD, mode=[2]), cute.size(gD, mode=[3])
        tile = (batch * tiles_n + tile_n) * tiles_m + tile_m
        tCcD = thr_mma.partition_C(cute.make_identity_tensor((self.tile_mnk[0], self.tile_mnk[1])))
        rows_here = rows - tile_m * self.tile_mnk[0]   # D's rows in this tile (its M may end inside it)
        tCgP = thr_mma.partition_C(self.partial_slice(mPartials, tile, split, split_k))
        for i in cutlass.range_constexpr(cute.size(rAcc)):
            if tCcD[i][0] < rows_here:
                tCgP[i] = rAcc[i]
        cute.arch.fence_acq_rel_gpu()        # release: this thread's partial before the count
        epilogue_barrier.arrive_and_wait()   # every consumer thread's partial and fence
        if consumer_tidx == 0:
            arrived = cute.arch.atomic_add(mCounters.iterator + tile, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            last = cutlass.Int32(0)
            if arrived == split_k - 1:
                last = cutlass.Int32(1)
                mCounters[tile] = cutlass.Int32(0)
            flag[0] = last
        epilogue_barrier.arrive_and_wait()
        last = flag[0]   # rewritten only after the next tile's first barrier, which every thread passes after this
        if last != 0:
            cute.arch.fence_acq_rel_gpu()    # acquire: the other splits' partials after their count
            slices = split_k
            if cutlass.const_expr(self.skip_last_slice):   # the negative control: tile (0, 0) of batch 0
                slices = split_k - (1 - cutlass.min(1, tile_m + tile_n + batch))
            tCgS = thr_mma.partition_C(self.partial_slice(mPartials, tile, 0, split_k))
            for i in cutlass.range_constexpr(cute.size(rAcc)):
                if tCcD[i][0] < rows_here:
                    rAcc[i] = cute.arch.load(tCgS.iterator + cute.crd2idx(i, tCgS.layout), cutlass.Float32, cop="cg")
            for s in cutlass.range(1, slices, unroll=1):
                tCgS = thr_mma.partition_C(self.partial_slice(mPartials, tile, s, split_k))
                for i in cutlass.range_constexpr(cute.size(rAcc)):
                    if tCcD[i][0] < rows_here:
                        rAcc[i] = rAcc[i] + cute.arch.load(tCgS.iterator + cute.crd2idx(i, tCgS.layout),
                                                           cutlass.Float32, cop="cg")
        return last
