"""Which K tiles each work tile of our Hopper GEMM covers, and how the splits of one output tile meet.

The persistent walk itself (gemm_base.Sm90GemmBase.make_scheduler: a static schedule over the work
tiles (m, n, l), cluster by cluster) is shared with the FP8 GEMM; this module holds what HopperGemm
adds to it. Split-K (split_k > 1): work tile l = batch * split_k + s covers the s-th of split_k
contiguous ranges of the K tiles, and the splits of one output tile are reduced inside the same
launch (reduce_partials): each stores its FP32 partial to a workspace (config.split_workspace sizes
it) with 128-bit stores in the accumulator's own fragment order, and counts itself on the tile's
counter; the last to arrive reads them back the same way, every consumer thread its own vectors, sums
them in the fixed order 0 .. split_k - 1 (the same bits every run) and runs the epilogue. Nothing
waits on another CTA, and the workspace does not depend on D's major mode (swap-AB splits too).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from .sm90_common import WARPGROUP_THREADS

VECTOR = 4   # FP32 values per 128-bit access of the split-K workspace


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

    def partial_vectors(self, mPartials: cute.Tensor, tile, split, split_k, consumer_tidx, values: int) -> cute.Tensor:
        """This thread's part of split `split`'s FP32 partial of output tile `tile` (its index in
        split_workspace's order): the partial is a whole tile_m x tile_n block in accumulator-fragment
        order, vector v of thread t at (v * threads + t) * 4, so each thread's `values` registers are
        values / 4 16-byte vectors and a warp's vector access is 512 contiguous bytes. The layout is the
        kernel's own (the same thread of every split holds the same fragment), whatever D's major mode."""
        threads = self.tile_warpgroups() * WARPGROUP_THREADS
        tile_elems = self.tile_mnk[0] * self.tile_mnk[1]
        offset = cute.assume((cutlass.Int64(tile) * split_k + split) * tile_elems + consumer_tidx * VECTOR, divby=VECTOR)
        return cute.make_tensor(mPartials.iterator + offset,
                                cute.make_layout((VECTOR, values // VECTOR), stride=(1, VECTOR * threads)))

    @cute.jit
    def reduce_partials(self, split_inputs, rAcc, epilogue_barrier, consumer_tidx, gD, tile_m, tile_n, batch, split,
                        split_k):
        """Split-K inside the kernel, deterministic, nothing waiting on another CTA. Each split stores its
        whole partial (rAcc) to its block with 128-bit stores in fragment order (partial_vectors),
        fences (release, gpu scope) and, once every consumer thread has (the named barrier), one thread
        adds 1 to the tile's counter (acq_rel) and publishes through shared memory whether it was the
        last of split_k. The last, after an acquire fence, reads the blocks back with 128-bit loads, every
        consumer thread its own vectors, and sums them in the fixed order 0 .. split_k - 1 into rAcc (the
        same bits whichever split is last), resets the counter to 0 for the next launch (every split has
        arrived) and returns 1: its caller runs the epilogue. The others return 0."""
        mPartials, mCounters, flag = split_inputs
        tiles_m, tiles_n = cute.size(gD, mode=[2]), cute.size(gD, mode=[3])
        last = cutlass.Int32(0)
        # a cluster's partner past D's last row or column tile (odd tile counts) has nothing to reduce,
        # and no counter or block of its own
        if cutlass.min(1, tile_m // tiles_m + tile_n // tiles_n) == 0:
            last = self._reduce_inside(mPartials, mCounters, flag, rAcc, epilogue_barrier, consumer_tidx,
                                       (batch * tiles_n + tile_n) * tiles_m + tile_m, tile_m + tile_n + batch, split,
                                       split_k)
        return last

    @cute.jit
    def _reduce_inside(self, mPartials, mCounters, flag, rAcc, epilogue_barrier, consumer_tidx, tile, corner, split,
                       split_k):
        """reduce_partials for output tile `tile` (its index in split_workspace's order) inside D; corner
        is 0 only for tile (0, 0) of batch 0 (the negative control's tile)."""
        values = cute.size(rAcc)
        vectors = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.acc_dtype, num_bits_per_copy=VECTOR * 32)
        rVec = cute.make_tensor(rAcc.iterator, cute.make_layout((VECTOR, values // VECTOR)))   # rAcc as vectors
        cute.copy(vectors, rVec, self.partial_vectors(mPartials, tile, split, split_k, consumer_tidx, values))
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
                slices = split_k - (1 - cutlass.min(1, corner))
            cute.copy(vectors, self.partial_vectors(mPartials, tile, 0, split_k, consumer_tidx, values), rVec)
            rPart = cute.make_rmem_tensor(rVec.layout, self.acc_dtype)
            for s in cutlass.range(1, slices, unroll=1):
                cute.copy(vectors, self.partial_vectors(mPartials, tile, s, split_k, consumer_tidx, values), rPart)
                rVec.store(rVec.load() + rPart.load())
        return last
