"""The skeleton both Hopper GEMMs (hopper_gemm.py, ../fp8_blockscale_gemm) are built on: everything but the mainloop.

Sm90GemmBase holds what a warp-specialized persistent wgmma GEMM does the same way whatever its math:
the TMA atoms of A, B (multicast inside the cluster) and D, the static persistent scheduler walk, the
mbarrier ring between the TMA producer warp and the consumer warpgroups (PipelineTmaAsync, its arrive
counts and transaction bytes checked by pipeline_checks while the kernel is traced), the producer loop
over a tile's K tiles, the setmaxnreg split between the roles, the stmatrix + TMA-store epilogue of one
(epi_tile) slice, the shared-memory sizing that picks the stage counts, and the consumer schedule:
cooperative (the consumer warpgroups split one tile's rows and run its epilogue together) or
ping-pong (two warpgroups take alternate tiles, and the ordered barriers of WarpgroupOrder let one
run its mainloop while the other runs its epilogue). A specialization keeps its
own mainloop (how the consumers turn stages into an accumulator) and what its tiles need beyond A and B.
"""

from __future__ import annotations

import enum
import warnings

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from . import pipeline_checks
from .sm90_common import SMEM_BYTES, WARPGROUP_THREADS, load_atom

PRODUCER_REGISTERS, CONSUMER_REGISTERS = 40, 232   # setmaxnreg targets (multiples of 8, sum fits 64K)
EPI_TILE_N = 32         # epilogue slice: (rows, 32) columns at a time through shared memory
TMA_WARPS = 1           # the producer warpgroup's warp 0 issues every load


SCHEDULES = ("cooperative", "pingpong")


class NamedBarrier(enum.IntEnum):
    """Named barrier ids (0 is __syncthreads, 15 the last of the 16); a specialization numbers its own
    from FIRST_FREE up. The ping-pong order barriers take the top four ids, one per (mainloop or
    epilogue, warpgroup), so that they never meet a specialization's own."""
    EPILOGUE = 1
    FIRST_FREE = 2
    MMA_ORDER = 12          # 12 + w: warpgroup w may issue its mainloop's wgmmas
    EPILOGUE_ORDER = 14     # 14 + w: warpgroup w may run its epilogue


# nvidia-cutlass-dsl 4.8.1 marks its persistent tile scheduler as moved to CUTLASS's examples; at the
# pinned version the wheel copy is the one available, so only that message is silenced.
warnings.filterwarnings("ignore", message="Migrated to examples/CuTeDSL/helpers", category=DeprecationWarning)


def _align(offset: int, to: int) -> int:
    return -(-offset // to) * to


class WarpgroupOrder:
    """The ordered barrier pair of the ping-pong schedule: consumer warpgroups 0 and 1 take turns at one
    stage of their work (the mainloop's wgmmas, or the epilogue), 0 first. One named barrier per
    warpgroup counts both warpgroups' threads: the owner waits on its own (bar.sync), the other
    warpgroup signals it (bar.arrive) when its own turn ends. Warpgroup 0's first turn has no one to
    signal it, so it does not wait (as CUTLASS's OrderedSequenceBarrier starts group 0 in the other
    phase). An arrival that no turn follows (the last tile's) is left pending when the CTA exits.
    """

    THREADS = 2 * WARPGROUP_THREADS

    def __init__(self, first_id: int, warpgroup, checked: bool = False):
        if not checked:
            pipeline_checks.check(f"order barriers {first_id}, {first_id + 1} (threads)", self.THREADS,
                                  pipeline_checks.ordered_barrier_threads(WARPGROUP_THREADS, 2),
                                  warpgroup_threads=WARPGROUP_THREADS, warpgroups=2)
        self.first_id, self.warpgroup = first_id, warpgroup

    # a loop that uses it carries it: its run-time part is the warpgroup index
    def __get_mlir_types__(self):
        return [self.warpgroup.type]

    def __extract_mlir_values__(self):
        return [self.warpgroup.ir_value()]

    def __new_from_mlir_values__(self, values):
        return WarpgroupOrder(self.first_id, cutlass.Int32(values[0]), checked=True)

    def _barrier(self, warpgroup) -> pipeline.NamedBarrier:
        return pipeline.NamedBarrier(barrier_id=self.first_id + warpgroup, num_threads=self.THREADS)

    @cute.jit
    def wait(self, turns_taken) -> None:
        """Block until it is this warpgroup's turn; `turns_taken`: how many it has had so far."""
        if turns_taken + self.warpgroup > 0:
            self._barrier(self.warpgroup).arrive_and_wait()

    def hand_over(self) -> None:
        """End this warpgroup's turn: the other warpgroup may take its own."""
        self._barrier(1 - self.warpgroup).arrive()


class Sm90GemmBase:
    """A persistent, warp-specialized Hopper GEMM without its mainloop.

    Roles: warpgroup 0 produces (setmaxnreg down; its warp 0 issues the TMA loads), warpgroups 1..
    consume (setmaxnreg up) and run the epilogue. `schedule` says how the consumers share the work:
    "cooperative" (every consumer warpgroup on each tile, 64 rows each) or "pingpong" (two
    warpgroups, each owning every other tile of the walk whole). A specialization provides:
    - attributes, set in its __init__ before `fit_stages`: ab_dtype, d_dtype, acc_dtype; d_layout
      (default ROW_MAJOR); tile_mnk
      (tile_m, tile_n, tile_k); cluster_mn; swizzle; warpgroups (consumer warpgroups, 64 rows of wgmma
      each); threads (WARPGROUP_THREADS * (1 + warpgroups)); epi_tile (rows, columns of a D slice);
      then stages and epi_stages, from fit_stages;
    - stage_extras(): the (bytes, alignment) of each per-stage buffer besides A and B (default none);
    - extra_load_boxes(): (elements, bits) of each further TMA box one stage receives (default none);
    - produce_tile(...): which K tiles of a work tile to load (calling load_k_tiles), and, when a stage
      holds more than A and B, slice_extra_loads / load_stage_extras for those loads;
    - __call__ (builds the layouts and make_shared_storage, calls launch), kernel (calls the prologue
      pieces below, then dispatch_roles) and consume(...): its mainloop, then its epilogue through
      make_epilogue / partition_d / store_slice.
    """

    schedule = "cooperative"
    # D in global memory: ROW_MAJOR (N contiguous), or COL_MAJOR (M contiguous: the epilogue's D slices
    # are M-major in shared memory and stmatrix writes them transposed; 16-bit D only, as stmatrix is)
    d_layout = LayoutEnum.ROW_MAJOR
    smem_words = 0   # Int32 words before the barriers (a specialization's flags between its threads)

    # --- host side: sizing, atoms, scheduler, launch --------------------------------------------------

    def tile_warpgroups(self) -> int:
        """Consumer warpgroups that work on one tile (and so read each stage, and run its epilogue):
        all of them when cooperative, one when ping-pong."""
        return self.warpgroups if self.schedule == "cooperative" else 1

    def stage_extras(self) -> tuple[tuple[int, int], ...]:
        """(bytes, alignment) of each per-stage buffer after A and B in SharedStorage."""
        return ()

    def extra_load_boxes(self) -> tuple[tuple[int, int], ...]:
        """(elements, bits) of each TMA box besides A's and B's that lands in one stage."""
        return ()

    def smem_bytes(self, stages: int, epi_stages: int) -> int:
        """Shared memory of a SharedStorage with these stage counts, alignment included: the barriers
        (a full and an empty one per stage), A and B (1024-aligned for the 128-byte swizzle), the extras,
        the D slices; the words (first) fit in front of the barriers' 1024-byte block."""
        tile_m, tile_n, tile_k = self.tile_mnk
        offset = _align(_align(4 * self.smem_words, 8) + stages * 2 * 8, 1024)
        offset += stages * tile_m * tile_k * self.ab_dtype.width // 8
        offset = _align(offset, 1024) + stages * tile_n * tile_k * self.ab_dtype.width // 8
        for size, alignment in self.stage_extras():
            offset = _align(offset, alignment) + stages * size
        return _align(offset, 1024) + epi_stages * self.epi_tile[0] * self.epi_tile[1] * self.d_dtype.width // 8

    def fit_stages(self, least_epi_stages: int, most_epi_stages: int, most_stages: int | None = None) -> tuple[int, int]:
        """(stages, epi_stages): as many mainloop stages as fit beside least_epi_stages D buffers (at most
        most_stages), then as many more D buffers, up to most_epi_stages, as the rest holds."""
        if most_stages is None:
            most_stages = SMEM_BYTES // (self.smem_bytes(2, 0) - self.smem_bytes(1, 0))
        stages = max(s for s in range(1, most_stages + 1) if self.smem_bytes(s, least_epi_stages) <= SMEM_BYTES)
        epi_stages = max(e for e in range(least_epi_stages, max(least_epi_stages, most_epi_stages) + 1)
                         if self.smem_bytes(stages, e) <= SMEM_BYTES)
        return stages, epi_stages

    def make_shared_storage(self, sA_layout, sB_layout, sD_layout, extras=()):
        """The SharedStorage struct, in the order smem_bytes sizes it: ab_barriers (full and empty per
        stage), sA, sB, each (name, dtype, layout, alignment) of `extras`, sD, with smem_words Int32
        words in front when there are any; raises if its size is not
        what smem_bytes predicted (the stage counts were fitted with that prediction)."""
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        fields = {"words": MemRange[cutlass.Int32, self.smem_words]} if self.smem_words else {}
        fields |= {"ab_barriers": MemRange[cutlass.Int64, self.stages * 2],
                  "sA": Align[MemRange[self.ab_dtype, cute.cosize(sA_layout)], 1024],
                  "sB": Align[MemRange[self.ab_dtype, cute.cosize(sB_layout)], 1024],
                  **{name: Align[MemRange[dtype, cute.cosize(layout)], alignment]
                     for name, dtype, layout, alignment in extras},
                  "sD": Align[MemRange[self.d_dtype, cute.cosize(sD_layout)], 1024]}
        storage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))
        predicted = self.smem_bytes(self.stages, self.epi_stages)
        if storage.size_in_bytes() != predicted:
            raise ValueError(f"SharedStorage holds {storage.size_in_bytes()} bytes but smem_bytes predicted {predicted}: "
                             f"stage_extras() and the extras passed here disagree")
        return storage

    def make_ab_atoms(self, mA: cute.Tensor, mB: cute.Tensor, sA_layout, sB_layout):
        """(tma_a, gA_tma, tma_b, gB_tma): A is shared by the CTAs of a cluster row (same M, different N)
        and multicast along N; B along M."""
        cluster_m, cluster_n = self.cluster_mn
        tma_a, gA_tma = load_atom(mA, sA_layout, (self.tile_mnk[0], self.tile_mnk[2]), cluster_n)
        tma_b, gB_tma = load_atom(mB, sB_layout, (self.tile_mnk[1], self.tile_mnk[2]), cluster_m)
        return tma_a, gA_tma, tma_b, gB_tma

    def make_d_atom(self, mD: cute.Tensor, sD_layout):
        """(tma_d, gD_tma): the TMA store of one epi_tile slice of D."""
        return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mD,
                                           cute.slice_(sD_layout, (None, None, 0)), self.epi_tile)

    def make_scheduler_params(self, mD: cute.Tensor, max_active_clusters: int, work_l=None):
        """(scheduler params, grid): the work tiles (m, n, l) over D's output tiles, l in 0..work_l - 1
        (default D's batches; split-K: batches x splits), walked cluster by cluster by at most
        max_active_clusters resident clusters."""
        tiles_m, tiles_n = cute.ceil_div((mD.shape[0], mD.shape[1]), self.tile_mnk[:2])
        cluster_m, cluster_n = self.cluster_mn
        work_l = mD.shape[2] if work_l is None else work_l
        params = utils.PersistentTileSchedulerParams((tiles_m, tiles_n, work_l), (cluster_m, cluster_n, 1),
                                                     self.swizzle, True)
        return params, utils.StaticPersistentTileScheduler.get_grid_shape(params, max_active_clusters)

    def launch(self, kernel, grid, stream) -> None:
        """One CTA per SM (min_blocks_per_mp=1) of `threads` threads, in clusters of cluster_mn."""
        cluster_m, cluster_n = self.cluster_mn
        kernel.launch(grid=grid, block=(self.threads, 1, 1), cluster=(cluster_m, cluster_n, 1), min_blocks_per_mp=1,
                      stream=stream)

    # --- kernel prologue -----------------------------------------------------------------------------

    @cute.jit
    def thread_roles(self, atoms):
        """(tidx, warp, warpgroup index), with the TMA descriptors of `atoms` prefetched by warp 0."""
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        warpgroup_idx = cute.arch.make_warp_uniform(tidx // WARPGROUP_THREADS)
        if warp == 0:
            for atom in atoms:
                cpasync.prefetch_descriptor(atom)
        return tidx, warp, warpgroup_idx

    @cute.jit
    def cluster_position(self):
        """(cta_coord, a_mask, b_mask): this CTA's (m, n, 0) in the cluster, and the CTAs that receive
        its multicast loads: the same row for A, the same column for B (0: no multicast)."""
        cluster_m, cluster_n = self.cluster_mn
        cluster_layout = cute.make_layout((cluster_m, cluster_n, 1))
        cta_rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cta_coord = cluster_layout.get_flat_coord(cta_rank)
        a_mask = cute.make_layout_image_mask(cluster_layout, cta_coord, mode=1) if cutlass.const_expr(cluster_n > 1) else 0
        b_mask = cute.make_layout_image_mask(cluster_layout, cta_coord, mode=0) if cutlass.const_expr(cluster_m > 1) else 0
        return cta_coord, a_mask, b_mask

    def ab_consumer_arrivals(self) -> int:
        """The empty barrier's count as the kernel passes it: every consumer warp that reads a stage
        (of the warpgroups on its tile), once for each CTA whose loads it reads (itself and those
        sharing A or B)."""
        cluster_m, cluster_n = self.cluster_mn
        return (cluster_m + cluster_n - 1) * self.tile_warpgroups() * WARPGROUP_THREADS // 32

    def make_ab_pipeline(self, storage, tx_bytes: int, tiled_mma: cute.TiledMma):
        """The mbarrier ring of `stages` stages between the TMA warp and the consumers, its counts checked
        against the kernel facts. Initialised with defer_sync: the caller runs pipeline_init_arrive and
        pipeline_init_wait around the rest of its prologue."""
        cluster_m, cluster_n = self.cluster_mn
        tile_m, tile_n, tile_k = self.tile_mnk
        producer_arrivals, consumer_arrivals = 1, self.ab_consumer_arrivals()
        pipeline_checks.check("ab_pipeline full barrier (producer arrivals)", producer_arrivals,
                              pipeline_checks.tma_producer_arrivals(TMA_WARPS), tma_warps=TMA_WARPS)
        pipeline_checks.check("ab_pipeline empty barrier (consumer arrivals)", consumer_arrivals,
                              pipeline_checks.warp_release_arrivals(
                                  tiled_mma.size, pipeline_checks.multicast_sources(cluster_n, cluster_m)),
                              mma_threads=tiled_mma.size, a_multicast_ctas=cluster_n, b_multicast_ctas=cluster_m)
        boxes = ((tile_m * tile_k, self.ab_dtype.width), (tile_n * tile_k, self.ab_dtype.width),
                 *self.extra_load_boxes())
        pipeline_checks.check("ab_pipeline full barrier (transaction bytes)", tx_bytes,
                              pipeline_checks.stage_transaction_bytes(*boxes), boxes=boxes)
        return pipeline.PipelineTmaAsync.create(
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, producer_arrivals),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_arrivals),
            tx_count=tx_bytes,
            barrier_storage=storage.ab_barriers.data_ptr(),
            cta_layout_vmnk=cute.make_layout((1, cluster_m, cluster_n, 1)),
            defer_sync=True,
        )

    def partition_ab(self, tma_a, gA_tma, sA, a_mask, tma_b, gB_tma, sB, b_mask, cta_coord):
        """(ab_loads, k_tiles): the per-CTA TMA partitions of A and B, tAgA: (TMA, tiles_m, k_tiles, L)
        and tBgB: (TMA, tiles_n, k_tiles, L) against the stages tAsA, tBsB, bundled with their atoms and
        multicast masks for load_k_tiles."""
        cluster_m, cluster_n = self.cluster_mn
        gA = cute.local_tile(gA_tma, (self.tile_mnk[0], self.tile_mnk[2]), (None, None, None))
        gB = cute.local_tile(gB_tma, (self.tile_mnk[1], self.tile_mnk[2]), (None, None, None))
        tAsA, tAgA = cpasync.tma_partition(tma_a, cta_coord[1], cute.make_layout(cluster_n),
                                           cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, cta_coord[0], cute.make_layout(cluster_m),
                                           cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2))
        return (tma_a, tAgA, tAsA, a_mask, tma_b, tBgB, tBsB, b_mask), cute.size(gA, mode=[3])

    def tile_d(self, gD_tma: cute.Tensor) -> cute.Tensor:
        """gD: (tile_m, tile_n, tiles_m, tiles_n, L)."""
        return cute.local_tile(gD_tma, (self.tile_mnk[0], self.tile_mnk[1]), (None, None, None))

    @cute.jit
    def dispatch_roles(self, warp, warpgroup_idx, producer_args, consumer_args):
        """Hand the registers over and run the roles: warpgroup 0 gives registers back and its warp 0
        runs produce(*producer_args); the consumer warpgroups take them and run consume(*consumer_args)."""
        if warpgroup_idx == 0:
            cute.arch.setmaxregister_decrease(PRODUCER_REGISTERS)
            if warp == 0:
                self.produce(*producer_args)
        else:
            cute.arch.setmaxregister_increase(CONSUMER_REGISTERS)
            self.consume(*consumer_args)

    # --- producer ------------------------------------------------------------------------------------

    def make_scheduler(self, scheduler_params):
        """This CTA's static persistent walk over the output tiles."""
        return utils.StaticPersistentTileScheduler.create(scheduler_params, cute.arch.block_idx(), cute.arch.grid_dim())

    @cute.jit
    def produce(self, ab_pipeline, scheduler_params, ab_loads, extra_loads, tile_args):
        """The TMA warp: every work tile's K tiles into the ring (produce_tile says which), then wait
        until the consumers of the cluster have released every stage (they may still signal us)."""
        scheduler = self.make_scheduler(scheduler_params)
        work = scheduler.initial_work_tile_info()
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        while work.is_valid_tile:
            tile_m, tile_n, tile_l = work.tile_idx
            state = self.produce_tile(ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, tile_l, *tile_args)
            scheduler.advance_to_next_work()
            work = scheduler.get_current_work()
        ab_pipeline.producer_tail(state)

    @cute.jit
    def load_k_tiles(self, ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, l_a, l_b, first, count):
        """TMA-load K tiles first .. first + count - 1 of output tile (tile_m, tile_n), A from batch l_a and
        B from batch (group) l_b, one stage each, with the stage's extra loads. Returns the advanced
        state: the caller rebinds it (the tracer carries locals, not a helper's changes)."""
        tma_a, tAgA, tAsA, a_mask, tma_b, tBgB, tBsB, b_mask = ab_loads
        tAgA_tile = tAgA[(None, tile_m, None, l_a)]     # (TMA, k_tiles)
        tBgB_tile = tBgB[(None, tile_n, None, l_b)]
        extra_tile = self.slice_extra_loads(extra_loads, tile_m, l_a)
        for kt in cutlass.range(count, unroll=1):
            k_tile = first + kt
            ab_pipeline.producer_acquire(state)
            barrier = ab_pipeline.producer_get_barrier(state)
            cute.copy(tma_a, tAgA_tile[(None, k_tile)], tAsA[(None, state.index)], tma_bar_ptr=barrier,
                      mcast_mask=a_mask)
            cute.copy(tma_b, tBgB_tile[(None, k_tile)], tBsB[(None, state.index)], tma_bar_ptr=barrier,
                      mcast_mask=b_mask)
            self.load_stage_extras(extra_tile, barrier, state.index, k_tile)
            ab_pipeline.producer_commit(state)
            state.advance()
        return state

    def slice_extra_loads(self, extra_loads, tile_m, l_a):
        """The extra loads' partitions for one output tile (default: none)."""
        return extra_loads

    def load_stage_extras(self, extra_tile, barrier, stage, k_tile) -> None:
        """Issue the extra TMA loads of K tile k_tile into `stage` on `barrier` (default: none)."""

    # --- epilogue ------------------------------------------------------------------------------------

    def make_epilogue(self, tiled_mma: cute.TiledMma, sD: cute.Tensor, consumer_tidx):
        """(r2s, tRS_sD, slice_shape, epilogue_barrier, store_pipeline): the stmatrix copy from the
        accumulator's registers into the D slices in shared memory, tRS_sD (R2S, R2S_M, R2S_N, epi_stages),
        the register shape of one slice, the named barrier of the threads on one tile (ping-pong: one
        warpgroup; the two never hold it at once, their epilogues take turns) and the TMA-store ring
        (epi_stages buffers)."""
        r2s_atom = sm90_utils.get_smem_store_op(self.d_layout, self.d_dtype, self.acc_dtype)
        stmatrix = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(self.d_layout.is_m_major_c(), 4),
                                       self.d_dtype)
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = r2s.get_slice(consumer_tidx)
        tRS_sD = thr_r2s.partition_D(sD)
        slice_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
        consumer_threads = self.tile_warpgroups() * WARPGROUP_THREADS
        pipeline_checks.check("epilogue named barrier (threads)", consumer_threads, tiled_mma.size,
                              mma_threads=tiled_mma.size)
        epilogue_barrier = pipeline.NamedBarrier(barrier_id=int(NamedBarrier.EPILOGUE), num_threads=consumer_threads)
        store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, consumer_threads))
        return r2s, tRS_sD, slice_shape, epilogue_barrier, store_pipeline

    def partition_d(self, tma_d, sD: cute.Tensor, gD: cute.Tensor, tile_m, tile_n, tile_l):
        """(bSG_sD, bSG_gD): the D buffers and the epi_tile slices of output tile (tile_m, tile_n, tile_l)
        as the TMA store sees them."""
        gD_slices = cute.zipped_divide(gD[(None, None, tile_m, tile_n, tile_l)], self.epi_tile)
        return cpasync.tma_partition(tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_slices)

    @cute.jit
    def store_slice(self, epilogue, rSlice_out, buffer, tma_d, bSG_sD, bSG_gD, slice_coord, warp,
                    store_warp=WARPGROUP_THREADS // 32):
        """One D slice out: stmatrix into D buffer `buffer`, then `store_warp` (by default the first
        consumer warp; ping-pong: the first warp of the warpgroup on the tile) TMA-stores it to
        slice `slice_coord` of bSG_gD (indexed inside that warp's branch: outside it, every thread would
        compute the coordinates) and waits until at most epi_stages - 1 stores are in flight, so the next
        buffer is free."""
        r2s, tRS_sD, _, epilogue_barrier, store_pipeline = epilogue
        cute.copy(r2s, rSlice_out, tRS_sD[(None, None, None, buffer)])
        cute.arch.fence_proxy("async.shared", space="cta")   # stmatrix writes -> TMA reads
        epilogue_barrier.arrive_and_wait()
        if warp == store_warp:
            cute.copy(tma_d, bSG_sD[(None, buffer)], bSG_gD[(None, slice_coord)])
            store_pipeline.producer_commit()
            store_pipeline.producer_acquire()
        epilogue_barrier.arrive_and_wait()
