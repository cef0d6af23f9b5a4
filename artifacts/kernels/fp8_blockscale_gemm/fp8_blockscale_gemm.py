"""A DeepGEMM-style FP8 GEMM with fine-grained scaling for Hopper (sm_90a) in CuTe DSL.

What it does
    D[m, n] = sum_kb sfa[m, kb] * sfb[n // 128, kb] * sum_{k in block kb} A[m, k] * B[n, k]
    A: M x K e4m3, K-major, with one FP32 scale per row per 128 K elements ("1x128", per token);
    B: N x K e4m3, K-major, with one FP32 scale per 128 x 128 block; D: M x N bf16, row-major.
    Each 128-element K tile is one scale block: the consumers run its four wgmma k32 steps into a
    short-lived FP32 accumulator (the tensor core's own FP8 accumulation is not full FP32), wait for
    them, and promote: acc += tmp * sfa[row] * sfb[block], in FP32 FFMA, once per K tile.
    Output tiles are tile_m x tile_n, tile_m in {64, 128, 256}, tile_n in {16, 32, 64, 128, 192} (256
    rows with at most 128 columns); a 192-wide tile can straddle two B scale blocks, so its
    promotion takes the second block's scale from the split column on.
    One CTA per SM, persistent, a producer warpgroup and one (64-row tiles) or two consumer
    warpgroups (384 threads):
      warpgroup 0  producer (setmaxnreg down): its warp 0 TMA-loads the A tile, the B tile and the
                   tile's A scales of each K tile into one stage of a shared-memory ring
                   (one mbarrier transaction covers all three); A or B multicast inside a cluster;
      consumers    (setmaxnreg up), 64 rows each. The tensor core idles unless a warpgroup has
                   its next wgmmas queued before the ones running finish, so what lies between a
                   wait_group and the next issue is kept short; three mainloops:
                   - K tiles in flight (mma_ahead; tiles up to 128 wide, one 128-row half, the
                     default there): K tile k+1's 4 x wgmma go into a second temporary before K
                     tile k's are waited for (wait_group 1), then k's stage is released and k is
                     promoted; the tensor core always has work queued. Small M is latency-bound,
                     and this is where it pays most.
                   - one K tile at a time with turns (128 x 192, whose accumulator and temporary
                     leave no room for a second one): per K tile wait for the stage, 4 x wgmma,
                     wait_group 0, release, promote; the two warpgroups take turns issuing (two
                     named barriers), so one's MMAs run while the other promotes.
                   - 256-row tiles: two 128-row halves (DeepGEMM's WAVE_BLOCK_M) run one after the
                     other through one temporary, each promoted into its own accumulator, so a B
                     tile in shared memory serves 256 rows (3/4 of a 128 x 128 tile's bytes per
                     FLOP); no turns (the halves already stagger the warpgroups).
                   The last two prepare the next K tile (its B scales, a try_wait on its stage's
                   barrier, the next pipeline state) while the last half's MMAs run. A scales
                   come from shared memory, B scales from global memory, both per K tile.
      epilogue     stmatrix into shared memory, TMA store in (128, 32) slices (64 rows for 64-row
                   tiles, 16 columns for 16-wide ones) through as many buffers as the mainloop
                   stages leave room for; a store is waited for only when its buffer comes round
                   again. whole_tile_epilogue (the default for 256-row tiles) gives every slice of
                   a tile a buffer (DeepGEMM's smem_d) at the cost of a stage.
    Everything but the mainloops and the scales is the skeleton shared with the bf16 GEMM
    (../hopper_gemm/gemm_base.py), whose barrier counts pipeline_checks.py checks at compile time.
    `choose_tiling` picks the tile by waves of tiles on the GPU times a cost per tile fitted to H200
    timings (TILE_COST), and a 1x2 cluster (A multicast) from 129 rows on: 256x128 or 128-row tiles
    at large M (256 rows in the normal layout only), tiles with K tiles in flight and no cluster for
    M <= 128; given K, in the normal layout up to STREAM_MAX_M rows, a streaming model of B's bytes
    (stream_estimate) picks among 64-row tiles, data-parallel or stream-K, instead.
    Short A (a_rows 16 or 32, normal layout, 64-row tiles, M <= a_rows; opt-in, not yet run on a
    GPU): a stage holds a_rows rows of A; the wgmmas still read 64 rows from the stage's start,
    those past a_rows from whatever follows in shared memory, which only rows past M see (their
    results are discarded). The bytes saved become stages of B: a decode step's rate is set by the
    bytes of B each SM has in flight (11 stages instead of 8 at 64 x 128).
    Stream-K (streamk=True; normal layout, tiles up to 128 x 128 with K tiles in flight, no cluster):
    the work is (output tile, K tile) units, tile by tile, and CTA b of g takes the units
    [b * U // g, (b + 1) * U // g), so every SM streams the same share of B whatever the tile count
    (the decode shapes, where a tile per SM leaves a wave part-empty). A tile split between CTAs is
    summed in the kernel: each piece's partial goes to its CTA's workspace slot (128-bit stores, in
    fragment order), a counter per tile counts the pieces (release / acquire at GPU scope), and the
    CTA that finishes a tile's last piece adds all pieces in K order and stores the tile, so the
    result is bit-identical run to run whichever CTA finishes last; nothing waits on another CTA.
    choose_tiling weighs it (and short A) for 64-row tiles up to STREAM_MAX_M rows when given K.
    Shapes and strides are dynamic (compiled once per layout, tiling and variant): with a static
    extent of 1 (M = 1) CuTe drops that mode when it builds the TMA atoms, and A's load and D's
    store became 1-D copies of the wrong box (a crash); with dynamic extents every copy is 3-D.

Layouts (DeepGEMM's names)
    normal      A (M, K), sfa (M, K/128), B (N, K), sfb (ceil(N/128), K/128), D (M, N).
    contiguous  m-grouped, experts concatenated along M: A (M, K) as above; B (G, N, K), sfb
                (G, ceil(N/128), K/128); m_indices (M,) int32 gives each row's group. Every
                128 rows lie in one group (segments aligned to 128 rows); 128 rows whose first row
                has index -1 (padding) are skipped and their rows of D are left as they were. A
                256-row tile whose halves belong to two groups runs K once per group.
    masked      m-grouped with a fixed M_max: A (G, M_max, K), sfa (G, M_max, K/128), B and sfb as
                for contiguous, D (G, M_max, N); masked_m (G,) int32 on the device gives each group's
                valid rows, so the launch does not depend on host-side counts (CUDA-graph safe).
                Tiles wholly past a group's count are skipped; rows past the count inside a computed
                tile are written with whatever A holds there.
    sfa is stored M-major (stride 1 along M, DeepGEMM's and cuBLAS's layout) so a TMA box of 128
    rows is one K block's scales; its K-block stride must be a multiple of 4 floats (16 bytes),
    which `quantize.per_token_cast` guarantees by padding.

Constraints (can_implement): K a multiple of 128; N a multiple of 8 (TMA rows of D); stream-K as
    above, with (output tiles x K tiles) x CTAs under 2^31; tile_m in
    {64, 128, 256}, tile_n in {16, 32, 64, 128, 192}, tile_n <= 128 for 256 rows; any M >= 1;
    A and B may be views with any 16-byte-multiple row and group strides, sfa any M-major view
    with K-block and group strides that are multiples of 4 floats, all starting on 16-byte
    boundaries (`compile_gemm` checks the torch tensors);
    contiguous: M a multiple of 128 (a 256-row tile whose halves belong to two groups runs K twice,
    once per group, each pass computing its own half; padding halves are skipped);
    cluster_mn in {(1,1), (2,1), (1,2)}, and (1,1) or (1,2) for the grouped layouts: the two CTAs
    of a 2x1 cluster may belong to different groups, so they cannot share B.

Compile only (any machine): python -m artifacts.kernels.fp8_blockscale_gemm.fp8_blockscale_gemm --arch sm_90a
Run: probe-fp8-blockscale-gemm (kernelwiki probe run --probe probe-fp8-blockscale-gemm) on an H200.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
from pathlib import Path

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

# the pieces both Hopper GEMMs share live beside the bf16 GEMM (listed in this bundle's PROVENANCE)
from ..hopper_gemm import gemm_base, pipeline_checks, sm90_common
from ..hopper_gemm.gemm_base import EPI_TILE_N, NamedBarrier, Sm90GemmBase
from ..hopper_gemm.sm90_common import (DUMP_DIR, SMEM_BYTES, WARPGROUP_THREADS, batch_last, cached_kernel,
                         canonical, current_stream, cute_view, fake_tensor, load_atom, max_active_clusters)

BLOCK = 128            # scale granularity along K (and along N for B): one K tile = one scale block
TILE_MS = (64, 128, 256)  # 64: one consumer warpgroup; 256: two 128-row halves sharing B and the temporary
TILE_NS = (16, 32, 64, 128, 192)  # a tile meets at most two 128-wide B scale blocks
MMA_M = 128            # rows of one half: what the consumer warpgroups cover with one round of wgmmas
MAX_STAGES = 16       # small tiles: more loads in flight for the memory-bound small-M shapes
A_ROWS = (16, 32)      # short A (decode, M <= a_rows): rows of A a stage holds
MAX_SHORT_A_STAGES = 32   # short A: the stages of B in flight are what a decode step streams with
EPI_STAGES = 2        # epilogue buffers at least; more where the mainloop stages leave room
# Estimated time of one wave of output tiles, for choose_tiling: fitted to scratch timings of every
# tile of this kernel (K tiles in flight up to 128 wide, turns at 128 x 192, halves and the whole-tile
# epilogue at 256 x 128) on DeepGEMM's normal shapes at M = 64, 128 and 4096 on the H200
# (2026-12-01). The probe re-times the choice against the best 128-row tile in every run. 64 x 192
# is left out: it has no K tiles in flight, and 64 x 128 timed faster.
TILE_COST = {(64, 16): 0.3, (64, 32): 0.3, (64, 64): 0.45, (64, 128): 0.6, (128, 64): 0.55, (128, 128): 0.9,
             (128, 192): 1.4, (256, 128): 1.75}
# The contiguous layout: no 256-row tiles (a tile split between two groups runs its halves without
# the mainloop's look-ahead, and 256 x 128 timed well below 128 x 192 there); 128 x 192 timed faster
# than 128 x 128 on every contiguous shape
CONTIGUOUS_TILE_COST = {**{t: c for t, c in TILE_COST.items() if t[0] <= 128}, (128, 128): 1.0, (128, 192): 1.3}
# The masked layout: no 256-row tiles either (the probe's "ours, 128-row tiles" beside the 256-row
# choice ran faster at N x K = 7168 x 2048 and within about 1 % at 4096 x 7168, 2026-12-01)
MASKED_TILE_COST = {t: c for t, c in TILE_COST.items() if t[0] <= 128}
CLUSTER_FROM_M = 129   # fewer rows: no cluster (A is a few KB per K tile; 1x1 timed faster for 64x32 and 128x64)
MMA_AHEAD_MAX_N = 128  # widest tile with K tiles in flight: accumulator + two temporaries = 192 FP32 registers
TURN_BARRIER = int(NamedBarrier.FIRST_FREE)   # this barrier and the next: the two warpgroups' turns
STREAMK_SLOTS = 2      # partial sums a stream-K CTA may leave: the tile its range starts in, the one it ends in
MAX_STREAMK_CTAS = 1024   # stream-K CTAs at most (the kernel's unit arithmetic is 32-bit: units x CTAs < 2^31)
# The streaming model choose_tiling weighs 64-row tiles with (decode, M <= STREAM_MAX_M): a CTA streams B
# through its stages, and an SM's rate falls as more SMs stream, STREAM_RATE / (SMs streaming + STREAM_N0
# x 128 KiB / the CTA's bytes of B in flight); a unit (one K tile of one output tile) costs
# UNIT_US + its bytes / that rate, at least MMA_UNIT_US per 64 x 128; stream-K streams at
# STREAMK_EFFICIENCY of that rate and pays STREAMK_PIECE_US where CTAs share tiles. Fitted (log least
# squares) to H200 timings of every such tiling on 36 decode shapes (requests fp8-1 and fp8-2,
# 2026-12-02; held_out.FITTED_ON lists them).
STREAM_RATE = 4.6e6        # bytes per microsecond
STREAM_N0 = 20
UNIT_US = 0.1
MMA_UNIT_US = 0.18
STREAMK_EFFICIENCY = 0.85
STREAMK_PIECE_US = 2.5
STREAM_MAX_M = 64          # more rows: 128-row tiles, chosen by TILE_COST (stream-K timed slower there)
STREAM_TILE_NS = (32, 64, 128)
LAYOUTS = ("normal", "contiguous", "masked")
CLUSTERS = ((1, 1), (2, 1), (1, 2))


class Fp8BlockScaleGemm(Sm90GemmBase):
    """gemm_base's skeleton with a stage of A, B and A's scales, and the block-scaled mainloops: K tiles
    in flight, turns, 256-row halves, each promoting per 128-K block; work tiles follow the layout's groups."""

    def __init__(self, layout: str = "normal", tile_n: int = 128, cluster_mn: tuple[int, int] = (2, 1), swizzle: int = 1,
                 tile_m: int = 128, order_warpgroups: bool | None = None, unscaled_k_tile: int = -1,
                 whole_tile_epilogue: bool | None = None, mma_ahead: bool | None = None, streamk: bool = False,
                 a_rows: int | None = None):
        self.layout = layout
        self.ab_dtype, self.sf_dtype, self.d_dtype, self.acc_dtype = (
            cutlass.Float8E4M3FN, cutlass.Float32, cutlass.BFloat16, cutlass.Float32)
        self.tile_m, self.tile_n = tile_m, tile_n
        self.tile_mnk = (tile_m, tile_n, BLOCK)
        # short A (decode): a stage holds a_rows rows of A, not the MMA's 64; the wgmmas still read
        # 64 rows, the rest from whatever follows in shared memory, and only rows past M (< a_rows)
        # see it, so their results are discarded. The bytes saved become stages of B in flight.
        self.a_rows = tile_m if a_rows is None else a_rows
        if self.a_rows != tile_m and (self.a_rows not in A_ROWS or tile_m != 64 or layout != "normal"):
            raise ValueError(f"a_rows={a_rows} with layout {layout!r}, tile_m={tile_m}: short A takes a_rows in "
                             f"{A_ROWS}, the normal layout and tile_m=64")
        # a 256-row tile is two halves of MMA_M rows: the consumers run the halves one after the
        # other through one temporary accumulator, each half promoted into its own accumulator
        self.mma_m = min(tile_m, MMA_M)
        self.halves = tile_m // self.mma_m
        self.warpgroups = self.mma_m // 64          # consumer warpgroups, 64 rows each
        self.threads = WARPGROUP_THREADS * (1 + self.warpgroups)
        self.cluster_mn = cluster_mn
        self.swizzle = swizzle
        # two K tiles in flight (two temporaries): the next K tile's wgmmas are issued before this
        # one's are waited for and promoted; for one half whose accumulator and two temporaries fit
        self.mma_ahead = self.halves == 1 and tile_n <= MMA_AHEAD_MAX_N if mma_ahead is None else mma_ahead
        if self.mma_ahead and not (self.halves == 1 and tile_n <= MMA_AHEAD_MAX_N):
            raise ValueError(f"mma_ahead: tile {tile_m}x{tile_n}; two K tiles in flight need tile_m <= {MMA_M} "
                             f"and tile_n <= {MMA_AHEAD_MAX_N} (registers)")
        # turn-taking: timed faster for one 128-row half, slower for 256-row tiles (2026-12-01), whose
        # two halves already stagger the warpgroups; with K tiles in flight the queue is never empty
        if order_warpgroups is None:
            order_warpgroups = self.halves == 1
        self.order_warpgroups = order_warpgroups and self.warpgroups == 2 and not self.mma_ahead
        # stream-K: each CTA takes an equal run of the (output tile, K tile) units; a tile shared by several
        # CTAs is summed by the last to finish its part (_streamk_fixup), from partials in a workspace
        self.streamk = streamk
        if streamk and not (layout == "normal" and self.mma_ahead and tuple(cluster_mn) == (1, 1)):
            raise ValueError(f"streamk: layout {layout!r}, tile {tile_m}x{tile_n}, cluster {tuple(cluster_mn)}; stream-K "
                             f"runs the normal layout with K tiles in flight (tile_m <= {MMA_M}, tile_n <= "
                             f"{MMA_AHEAD_MAX_N}) and no cluster")
        self.smem_words = 1 if streamk else 0   # "this CTA is the last on the tile", for every consumer thread
        # contiguous layout with 256-row tiles: the two halves may belong to different groups
        self.split_groups = layout == "contiguous" and self.halves == 2
        # the negative control: this K tile is accumulated without its scales (sfa * sfb taken as 1)
        self.unscaled_k_tile = unscaled_k_tile
        self.epi_tile = (self.mma_m, min(EPI_TILE_N, tile_n))
        # as many mainloop stages as fit beside two epilogue buffers, then as many more epilogue
        # buffers as the rest holds (up to one per slice of a tile): a TMA store is waited for only
        # when its buffer comes round again, so more buffers mean fewer waits in the epilogue.
        # whole_tile_epilogue: a buffer for every slice (DeepGEMM's whole-tile smem_d, whose stores
        # are waited for only by the next tile's epilogue), at the cost of mainloop stages
        slices = self.halves * tile_n // self.epi_tile[1]
        if whole_tile_epilogue is None:   # timed at least as fast for 256-row tiles (2026-12-01)
            whole_tile_epilogue = self.halves == 2
        least = max(EPI_STAGES, slices) if whole_tile_epilogue else EPI_STAGES
        self.stages, self.epi_stages = self.fit_stages(least, slices, MAX_STAGES if self.a_rows == tile_m
                                                       else MAX_SHORT_A_STAGES)

    @contextlib.contextmanager
    def _loading(self):
        """tile_mnk as the loads see it while the base's load-side helpers run: A's box and stage are
        a_rows rows (the D side keeps tile_m)."""
        full = self.tile_mnk
        self.tile_mnk = (self.a_rows, *full[1:])
        try:
            yield
        finally:
            self.tile_mnk = full

    def smem_bytes(self, stages: int, epi_stages: int) -> int:
        """The base's sizing, with A stages of a_rows rows."""
        with self._loading():
            return super().smem_bytes(stages, epi_stages)

    def make_ab_atoms(self, mA: cute.Tensor, mB: cute.Tensor, sA_layout, sB_layout):
        """The base's TMA atoms, A's box a_rows rows."""
        with self._loading():
            return super().make_ab_atoms(mA, mB, sA_layout, sB_layout)

    def make_ab_pipeline(self, storage, tx_bytes: int, tiled_mma: cute.TiledMma):
        """The base's ring, its transaction bytes checked against A's box of a_rows rows."""
        with self._loading():
            return super().make_ab_pipeline(storage, tx_bytes, tiled_mma)

    def partition_ab(self, tma_a, gA_tma, sA, a_mask, tma_b, gB_tma, sB, b_mask, cta_coord):
        """The base's TMA partitions, A in tiles of a_rows rows (one, as M <= a_rows)."""
        with self._loading():
            return super().partition_ab(tma_a, gA_tma, sA, a_mask, tma_b, gB_tma, sB, b_mask, cta_coord)

    def stage_extras(self) -> tuple[tuple[int, int], ...]:
        """A stage also holds the tile's A scales of its K block: tile_m FP32, 128-byte aligned."""
        return ((self.tile_m * self.sf_dtype.width // 8, 128),)

    def extra_load_boxes(self) -> tuple[tuple[int, int], ...]:
        """The A scales' TMA box, (tile_m, 1) FP32, lands in the stage beside A and B."""
        return ((self.tile_m, self.sf_dtype.width),)

    @staticmethod
    def can_implement(layout: str, m: int, n: int, k: int, groups: int = 1, tile_n: int = 128,
                      cluster_mn: tuple[int, int] = (2, 1), tile_m: int = 128, streamk: bool = False,
                      a_rows: int | None = None) -> None:
        """Raise ValueError naming the offending value and the supported set."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} unsupported; use one of {LAYOUTS}")
        if tile_m not in TILE_MS:
            raise ValueError(f"tile_m={tile_m} unsupported; use one of {TILE_MS}")
        if tile_n not in TILE_NS:
            raise ValueError(f"tile_n={tile_n} unsupported; use one of {TILE_NS}")
        if tile_m > MMA_M and tile_n > BLOCK:
            raise ValueError(f"tile {tile_m}x{tile_n}: a {tile_m}-row tile takes tile_n <= {BLOCK} (two halves' "
                             "accumulators and the temporary must fit in 232 registers a thread)")
        if tuple(cluster_mn) not in CLUSTERS:
            raise ValueError(f"cluster_mn={tuple(cluster_mn)} unsupported; use one of {CLUSTERS}")
        if layout != "normal" and cluster_mn[0] != 1:
            raise ValueError(f"cluster_mn={tuple(cluster_mn)}: the {layout} layout needs cluster_m == 1 "
                             "(the CTAs of a 2x1 cluster may be in different groups and cannot share B)")
        if min(m, n, k, groups) < 1:
            raise ValueError(f"M, N, K and groups must be positive; got {m}, {n}, {k}, {groups}")
        if k % BLOCK:
            raise ValueError(f"K={k} must be a multiple of {BLOCK} (one scale block per K tile)")
        if n % 8:
            raise ValueError(f"N={n} must be a multiple of 8: rows of the bf16 D must be 16-byte aligned for TMA")
        if layout == "contiguous" and m % MMA_M:
            raise ValueError(f"M={m}: the contiguous layout needs M a multiple of {MMA_M} (each group's rows "
                             f"padded to {MMA_M}, padding rows with group index -1)")
        if a_rows is not None and a_rows != tile_m:
            if a_rows not in A_ROWS or tile_m != 64 or layout != "normal":
                raise ValueError(f"a_rows={a_rows} with layout {layout!r}, tile_m={tile_m}: short A takes a_rows in "
                                 f"{A_ROWS}, the normal layout and tile_m=64")
            if m > a_rows:
                raise ValueError(f"a_rows={a_rows} with M={m}: a stage holds a_rows rows of A, so M <= a_rows")
        if streamk:
            if layout != "normal" or tuple(cluster_mn) != (1, 1) or tile_m > MMA_M or tile_n > MMA_AHEAD_MAX_N:
                raise ValueError(f"streamk with layout {layout!r}, tile {tile_m}x{tile_n}, cluster {tuple(cluster_mn)}: "
                                 f"stream-K runs the normal layout, tile_m <= {MMA_M}, tile_n <= {MMA_AHEAD_MAX_N}, "
                                 f"cluster (1, 1)")
            units = streamk_units(m, n, k, tile_m, tile_n)
            if units * MAX_STREAMK_CTAS >= 2 ** 31:
                raise ValueError(f"streamk at {m}x{n}x{k} with {tile_m}x{tile_n} tiles: {units} units of work, past "
                                 f"the kernel's 32-bit arithmetic ({MAX_STREAMK_CTAS} CTAs); use streamk=False")

    @cute.jit
    def __call__(self, mA: cute.Tensor, mSFA: cute.Tensor, mB: cute.Tensor, mSFB: cute.Tensor, mD: cute.Tensor,
                 mGroup: cute.Tensor, mPartials: cute.Tensor, mCounters: cute.Tensor, ctas: cutlass.Int32,
                 max_active_clusters: cutlass.Constexpr, stream: cuda.CUstream):
        # mA: (M, K, L) K-major; mSFA: (M, K/128, L) M-major; mB: (N, K, G) K-major;
        # mSFB: (ceil(N/128), K/128, G); mD: (M, N, L) N-major; L = G for masked, else 1.
        # mGroup: m_indices (M,) for contiguous, masked_m (G,) for masked, unused (1,) for normal.
        # stream-K: mPartials (STREAMK_SLOTS * ctas * tile_m * tile_n,) FP32 and mCounters (output tiles,)
        # Int32, zero before the first launch (the kernel leaves them zero); ctas: the CTAs that share
        # the work. Unused (any (1,) tensors, any ctas) without stream-K.
        tiled_mma = self._tiled_mma()
        # A as TMA writes it, (tile_m, 128) per stage, and as the MMAs read it, (mma_m, 128) per half
        # and stage: the same bytes, since a K-major swizzled tile stacks its 8-row atoms along M.
        # Short A: TMA writes (a_rows, 128) per stage; the MMAs read 64 rows from each stage's start
        sA_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (self.a_rows, self.tile_n, BLOCK),
                                                  self.ab_dtype, self.stages)
        if cutlass.const_expr(self.a_rows == self.tile_m):
            sA_mma_layout = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (self.mma_m, self.tile_n, BLOCK),
                                                          self.ab_dtype, self.stages * self.halves)
            assert cute.cosize(sA_layout) == cute.cosize(sA_mma_layout)
        else:
            one = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (self.mma_m, self.tile_n, BLOCK), self.ab_dtype, 1)
            stage = cute.make_layout(self.stages, stride=self.a_rows * BLOCK)   # a stage every a_rows rows
            sA_mma_layout = cute.make_composed_layout(one.inner, 0, cute.append(cute.select(one.outer, mode=[0, 1]),
                                                                               stage))
        sB_layout = sm90_utils.make_smem_layout_b(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.ab_dtype, self.stages)
        sSFA_layout = cute.make_layout((self.tile_m, 1, self.stages))   # the tile's A scales of one K block
        sD_layout = sm90_utils.make_smem_layout_epi(self.d_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, self.epi_stages)

        tma_a, gA_tma, tma_b, gB_tma = self.make_ab_atoms(mA, mB, sA_layout, sB_layout)
        tma_sfa, gSFA_tma = load_atom(mSFA, sSFA_layout, (self.tile_m, 1), 1)
        tma_d, gD_tma = self.make_d_atom(mD, sD_layout)
        scheduler_params, grid = self.make_scheduler_params(mD, max_active_clusters)
        if cutlass.const_expr(self.streamk):
            grid = (ctas, 1, 1)
        self.shared_storage = self.make_shared_storage(sA_layout, sB_layout, sD_layout,
                                                       (("sSFA", self.sf_dtype, sSFA_layout, 128),))
        self.launch(self.kernel(tiled_mma, tma_a, gA_tma, tma_b, gB_tma, tma_sfa, gSFA_tma, tma_d, gD_tma, mSFB, mGroup,
                                mPartials, mCounters, sA_layout, sA_mma_layout, sB_layout, sSFA_layout, sD_layout,
                                scheduler_params), grid, stream)

    def _tiled_mma(self) -> cute.TiledMma:
        """The consumers' wgmma m64nNk32 (e4m3 x e4m3 -> FP32, both operands K-major in shared memory)."""
        k_major = cute.nvgpu.OperandMajorMode.K
        return sm90_utils.make_trivial_tiled_mma(self.ab_dtype, self.ab_dtype, k_major, k_major, self.acc_dtype,
                                                 (self.warpgroups, 1, 1), tiler_mn=(64, self.tile_n))

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, gA_tma: cute.Tensor, tma_b: cute.CopyAtom,
               gB_tma: cute.Tensor, tma_sfa: cute.CopyAtom, gSFA_tma: cute.Tensor, tma_d: cute.CopyAtom,
               gD_tma: cute.Tensor, mSFB: cute.Tensor, mGroup: cute.Tensor, mPartials: cute.Tensor,
               mCounters: cute.Tensor, sA_layout: cute.ComposedLayout,
               sA_mma_layout: cute.ComposedLayout, sB_layout: cute.ComposedLayout, sSFA_layout: cute.Layout, sD_layout: cute.ComposedLayout,
               scheduler_params: utils.PersistentTileSchedulerParams):
        tidx, warp, warpgroup_idx = self.thread_roles((tma_a, tma_b, tma_sfa, tma_d))
        cta_coord, a_mask, b_mask = self.cluster_position()

        storage = cutlass.memory.SmemAllocator().allocate(self.shared_storage)
        sA = storage.sA.get_tensor(sA_layout.outer, swizzle=sA_layout.inner)   # (tile_m, 128, stages) e4m3
        sA_mma = storage.sA.get_tensor(sA_mma_layout.outer, swizzle=sA_mma_layout.inner)  # (mma_m, 128, stages*halves)
        sB = storage.sB.get_tensor(sB_layout.outer, swizzle=sB_layout.inner)   # (tile_n, 128, stages) e4m3
        sSFA = storage.sSFA.get_tensor(sSFA_layout)                            # (tile_m, 1, stages) fp32
        sD = storage.sD.get_tensor(sD_layout.outer, swizzle=sD_layout.inner)   # (mma_m, 32, epi_stages) bf16

        stage_bytes = (cute.size_in_bytes(self.ab_dtype, cute.slice_(sA_layout, (None, None, 0)))
                       + cute.size_in_bytes(self.ab_dtype, cute.slice_(sB_layout, (None, None, 0)))
                       + cute.size_in_bytes(self.sf_dtype, cute.slice_(sSFA_layout, (None, None, 0))))
        ab_pipeline = self.make_ab_pipeline(storage, stage_bytes, tiled_mma)
        pipeline.pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        # tAgA: (TMA, tiles_m, k_tiles, L); tBgB: (TMA, tiles_n, k_tiles, G); gSFA: (tile_m, 1, tiles_m,
        # k_tiles, L); gD: (tile_m, tile_n, tiles_m, tiles_n, L)
        ab_loads, k_tiles = self.partition_ab(tma_a, gA_tma, sA, a_mask, tma_b, gB_tma, sB, b_mask, cta_coord)
        gSFA = cute.local_tile(gSFA_tma, (self.tile_m, 1), (None, None, None))
        tSsSFA, tSgSFA = cpasync.tma_partition(tma_sfa, 0, cute.make_layout(1),
                                               cute.group_modes(sSFA, 0, 2), cute.group_modes(gSFA, 0, 2))
        gD = self.tile_d(gD_tma)
        m_rows = gA_tma.shape[0]
        tiles_mn = (cute.size(gD, mode=[2]), cute.size(gD, mode=[3]))
        split_inputs = None
        if cutlass.const_expr(self.streamk):
            split_inputs = (mPartials, mCounters, storage.words.get_tensor(cute.make_layout(1)))

        pipeline.pipeline_init_wait(cluster_shape_mn=self.cluster_mn)
        self.dispatch_roles(warp, warpgroup_idx,
                            (ab_pipeline, scheduler_params, ab_loads, (tma_sfa, tSgSFA, tSsSFA),
                             (mGroup, m_rows, k_tiles, tiles_mn)),
                            (ab_pipeline, scheduler_params, mGroup, m_rows, k_tiles, tiled_mma, sA_mma, sB, sSFA, mSFB,
                             sD, gD, tma_d, tidx, warp, tiles_mn, split_inputs))

    @cute.jit
    def _work(self, mGroup: cute.Tensor, m_rows, tile_m, l):
        """(runs, l_a, l_b): whether this CTA computes output tile (tile_m, l), and the L coordinates
        of A (and sfa, D) and of B (and sfb)."""
        runs = True
        l_b = l
        if cutlass.const_expr(self.layout == "contiguous"):
            row = tile_m * self.tile_m
            l_b = cutlass.Int32(-1)
            if row < m_rows:
                l_b = mGroup[row]
            runs = l_b >= 0
        if cutlass.const_expr(self.layout == "masked"):
            runs = tile_m * self.tile_m < mGroup[l]
        return runs, l, l_b

    @cute.jit
    def produce(self, ab_pipeline, scheduler_params, ab_loads, extra_loads, tile_args):
        """The TMA warp: with stream-K, this CTA's run of (output tile, K tile) units, tile by tile;
        otherwise the base's walk over the scheduler's work tiles."""
        if cutlass.const_expr(self.streamk):
            _, _, k_tiles, tiles_mn = tile_args
            u, u_end, _ = self._streamk_span(k_tiles, tiles_mn)
            state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
            while u < u_end:
                tile, first, count = self._streamk_piece(u, u_end, k_tiles)
                state = self.load_k_tiles(ab_pipeline, state, ab_loads, extra_loads, tile % tiles_mn[0],
                                          tile // tiles_mn[0], 0, 0, first, count)
                u += count
            ab_pipeline.producer_tail(state)
        else:
            Sm90GemmBase.produce(self, ab_pipeline, scheduler_params, ab_loads, extra_loads, tile_args)

    @cute.jit
    def _streamk_span(self, k_tiles, tiles_mn):
        """(u, u_end, units): this CTA's units [u, u_end) of all units = output tiles x K tiles, unit
        tile * k_tiles + k; CTA b of g takes [b * units // g, (b + 1) * units // g)."""
        units = tiles_mn[0] * tiles_mn[1] * k_tiles
        b, _, _ = cute.arch.block_idx()
        g, _, _ = cute.arch.grid_dim()
        return b * units // g, (b + 1) * units // g, units

    @cute.jit
    def _streamk_piece(self, u, u_end, k_tiles):
        """(tile, first K tile, K tile count) of the piece of work that starts at unit u: to the end of
        its output tile or of the CTA's run, whichever comes first."""
        tile = u // k_tiles
        first = u - tile * k_tiles
        return tile, first, cutlass.min(k_tiles - first, u_end - u)

    @cute.jit
    def produce_tile(self, ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, l, mGroup, m_rows, k_tiles,
                     tiles_mn):
        """Every K tile of the work tile, from the group(s) its rows belong to; nothing for a skipped tile."""
        if cutlass.const_expr(self.split_groups):
            first, second, _, _ = self._half_groups(mGroup, m_rows, tile_m)
            if first >= 0:
                state = self.load_k_tiles(ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, l, first, 0, k_tiles)
            if second >= 0:   # halves of two groups: a second pass over K with the second group's B
                state = self.load_k_tiles(ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, l, second, 0,
                                          k_tiles)
        else:
            runs, l_a, l_b = self._work(mGroup, m_rows, tile_m, l)
            if runs:
                state = self.load_k_tiles(ab_pipeline, state, ab_loads, extra_loads, tile_m, tile_n, l_a, l_b, 0, k_tiles)
        return state

    def slice_extra_loads(self, extra_loads, tile_m, l_a):
        """The A scales of output tile rows tile_m, batch l_a: (tma_sfa, tSgSFA (TMA, k_tiles), tSsSFA)."""
        tma_sfa, tSgSFA, tSsSFA = extra_loads
        return tma_sfa, tSgSFA[(None, tile_m, None, l_a)], tSsSFA

    @cute.jit
    def load_stage_extras(self, extra_tile, barrier, stage, k_tile) -> None:
        """K tile k_tile's A scales into the stage, on the stage's barrier."""
        tma_sfa, tSgSFA_tile, tSsSFA = extra_tile
        cute.copy(tma_sfa, tSgSFA_tile[(None, k_tile)], tSsSFA[(None, stage)], tma_bar_ptr=barrier)

    @cute.jit
    def _half_groups(self, mGroup, m_rows, tile_m):
        """Contiguous layout, 256-row tiles: (first, second, g0, g1). g0, g1: the groups of the tile's
        two 128-row halves (-1: padding rows or past M); first: the group of the first pass over K
        (g0, or g1 when the first half is padding); second: the group of a second pass when the
        halves belong to two groups, else -1. A pass computes the halves of its group only."""
        row = tile_m * self.tile_m
        g0, g1 = cutlass.Int32(-1), cutlass.Int32(-1)
        if row < m_rows:
            g0 = mGroup[row]
        if row + MMA_M < m_rows:
            g1 = mGroup[row + MMA_M]
        first = g0
        if g0 < 0:
            first = g1
        second = cutlass.Int32(-1)
        if g0 >= 0 and g1 >= 0 and g1 != g0:
            second = g1
        return first, second, g0, g1

    @cute.jit
    def consume(self, ab_pipeline, scheduler_params, mGroup, m_rows, k_tiles, tiled_mma, sA, sB, sSFA, mSFB, sD,
                 gD, tma_d, tidx, warp, tiles_mn, split_inputs):
        # sA: (mma_m, 128, stages * halves), half h of stage s at index s * halves + h
        consumer_tidx = tidx - WARPGROUP_THREADS   # the thread's index among the consumer warpgroups
        thr_mma = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))   # smem descriptors per K block and stage
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_C(cute.make_identity_tensor((self.mma_m, self.tile_n))).shape  # ((2, 2, N/8), 1, 1)
        accs = [cute.make_rmem_tensor(acc_shape, self.acc_dtype) for _ in range(self.halves)]  # promoted FP32 sums
        # one half's K-tile wgmma result; two with K tiles in flight (the next one's MMAs run meanwhile)
        tmps = [cute.make_rmem_tensor(acc_shape, self.acc_dtype) for _ in range(1 + self.mma_ahead)]
        # the first k32 step of a K tile overwrites the temporary, the others add to it: one MMA for
        # each, set here once (an MMA changed inside a loop or branch would have to be carried out of it)
        mma_first, mma_rest = tiled_mma, self._tiled_mma()
        mma_first.set(warpgroup.Field.ACCUMULATE, False)
        mma_rest.set(warpgroup.Field.ACCUMULATE, True)
        mmas = (mma_first, mma_rest)
        # wgmma m64nNk32 accumulator: element (c, r, j) of a thread sits at row warp%4*16 + r*8 + lane/4
        # of its warpgroup's 64 rows; r = 0/1 are the thread's two rows, so two A scales per K tile and half.
        lane = consumer_tidx % 32
        row0 = consumer_tidx // WARPGROUP_THREADS * 64 + (consumer_tidx % WARPGROUP_THREADS) // 32 * 16 + lane // 4
        n_blocks = mSFB.shape[0]

        epilogue = self.make_epilogue(tiled_mma, sD, consumer_tidx)
        r2s, _, slice_shape, _, store_pipeline = epilogue
        tRS_accs = [r2s.retile(acc) for acc in accs]
        rSlice_out = cute.make_rmem_tensor(slice_shape, self.d_dtype)
        # Turn-taking: the two consumer warpgroups issue their wgmmas one after the other
        # (barrier 2 = warpgroup 0's turn, 3 = warpgroup 1's), so the tensor core runs one's half
        # K tile while the other waits for its own and promotes, instead of both promoting at once.
        wg = consumer_tidx // WARPGROUP_THREADS
        if cutlass.const_expr(self.order_warpgroups):
            pipeline_checks.check("turn named barriers (threads)", 2 * WARPGROUP_THREADS, tiled_mma.size,
                                  mma_threads=tiled_mma.size)
        my_turn = pipeline.NamedBarrier(barrier_id=TURN_BARRIER + wg, num_threads=2 * WARPGROUP_THREADS)
        other_turn = pipeline.NamedBarrier(barrier_id=TURN_BARRIER + 1 - wg, num_threads=2 * WARPGROUP_THREADS)
        if cutlass.const_expr(self.order_warpgroups):
            if wg == 1:
                other_turn.arrive()   # warpgroup 0 goes first

        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        slices_done = cutlass.Int32(0)
        store = (epilogue, tRS_accs, rSlice_out, tma_d, sD, gD, warp)
        if cutlass.const_expr(self.streamk):
            # this CTA's run of units, piece by piece: a whole output tile is stored at once; a piece of
            # a shared tile goes through _streamk_fixup, and the CTA that finishes the tile's last piece
            # stores the sum of all its pieces
            u, u_end, units = self._streamk_span(k_tiles, tiles_mn)
            while u < u_end:
                tile, first, count = self._streamk_piece(u, u_end, k_tiles)
                tile_m, tile_n = tile % tiles_mn[0], tile // tiles_mn[0]
                block_lo, block_hi, split = self._scale_blocks(tile_n, n_blocks)
                accs[0].fill(0.0)
                state = self._mainloop_ahead(ab_pipeline, count, mmas, tCrA, tCrB, sSFA, mSFB, accs, tmps, row0,
                                             block_lo, block_hi, split, state, 0, first)
                last = cutlass.Int32(1)
                if count < k_tiles:
                    last = self._streamk_fixup(split_inputs, accs[0], tmps[0], tile, k_tiles, units, consumer_tidx,
                                               m_rows - tile_m * self.tile_m, epilogue[3])
                if last != 0:
                    slices_done = self._store_tile(store, tile_m, tile_n, 0, (True,), slices_done)
                u += count
        else:
            scheduler = self.make_scheduler(scheduler_params)
            work = scheduler.initial_work_tile_info()
            while work.is_valid_tile:
                tile_m, tile_n, l = work.tile_idx
                if cutlass.const_expr(self.split_groups):
                    first, second, g0, g1 = self._half_groups(mGroup, m_rows, tile_m)
                    runs, l_a = first >= 0, l
                else:
                    runs, l_a, l_b = self._work(mGroup, m_rows, tile_m, l)
                if runs:
                    # The tile's columns [n0, n0 + tile_n) meet at most two B scale blocks: lo up to
                    # local column `split`, hi after it (a 192-wide tile at n0 % 128 == 64 splits at 64).
                    # A cluster may run a tile past N: the reads are clamped.
                    block_lo, block_hi, split = self._scale_blocks(tile_n, n_blocks)
                    for h in cutlass.range_constexpr(self.halves):
                        accs[h].fill(0.0)
                    loop = (ab_pipeline, k_tiles, mmas, tCrA, tCrB, sSFA, mSFB, accs, tmps, row0, block_lo, block_hi,
                            split)
                    stores = (True,) * self.halves
                    if cutlass.const_expr(self.split_groups):
                        if first >= 0:
                            state = self._mainloop(*loop, my_turn, other_turn, state, first, g0 == first, g1 == first)
                        if second >= 0:
                            state = self._mainloop(*loop, my_turn, other_turn, state, second, False, True)
                        stores = (g0 >= 0, g1 >= 0)   # padding halves are left as they were
                    elif cutlass.const_expr(self.mma_ahead):
                        state = self._mainloop_ahead(*loop, state, l_b, 0)
                    else:
                        state = self._mainloop(*loop, my_turn, other_turn, state, l_b, True, True)
                    slices_done = self._store_tile(store, tile_m, tile_n, l_a, stores, slices_done)
                scheduler.advance_to_next_work()
                work = scheduler.get_current_work()
        if cutlass.const_expr(self.order_warpgroups):
            if wg == 0:
                my_turn.arrive_and_wait()   # take warpgroup 1's last hand-over: every arrival is matched
        store_pipeline.producer_tail()

    @cute.jit
    def _scale_blocks(self, tile_n, n_blocks):
        """(block_lo, block_hi, split): the B scale blocks of output tile column tile_n, lo up to local
        column `split`, hi after it (clamped: a cluster may run a tile past N)."""
        n0 = tile_n * self.tile_n
        return cutlass.min(n0 // BLOCK, n_blocks - 1), cutlass.min(n0 // BLOCK + 1, n_blocks - 1), BLOCK - n0 % BLOCK

    @cute.jit
    def _store_tile(self, store, tile_m, tile_n, l_a, stores, slices_done):
        """The epilogue of one output tile: each half (stores[h]: whether it is stored) in (mma_m, 32)
        slices through the ring of epi_stages D buffers. The ring advances by stores made: a buffer
        comes round only after the epi_stages - 1 stores store_slice's acquire leaves in flight.
        Returns slices_done advanced by the slices stored."""
        epilogue, tRS_accs, rSlice_out, tma_d, sD, gD, warp = store
        bSG_sD, bSG_gD = self.partition_d(tma_d, sD, gD, tile_m, tile_n, l_a)
        slice_size = cute.size(rSlice_out)
        for h in cutlass.range_constexpr(self.halves):
            if stores[h]:
                for s in cutlass.range_constexpr(self.tile_n // self.epi_tile[1]):
                    for v in cutlass.range_constexpr(slice_size):
                        rSlice_out[v] = tRS_accs[h][s * slice_size + v].to(self.d_dtype)
                    self.store_slice(epilogue, rSlice_out, slices_done % self.epi_stages, tma_d, bSG_sD, bSG_gD,
                                     (h, s), warp)
                    slices_done += 1
        return slices_done

    @cute.jit
    def _streamk_fixup(self, split_inputs, acc, part, tile, k_tiles, units, consumer_tidx, rows_here,
                       epilogue_barrier):
        """A piece of output tile `tile` that other CTAs share (stream-K), deterministic, nothing
        waiting on another CTA. The tile's pieces belong to CTAs first_cta .. last_cta, in K order.
        Every piece's CTA stores its partial (acc) to its slot, fences (release, gpu scope) and, once
        every consumer thread has, one thread adds 1 to the tile's counter (acq_rel); the CTA that
        arrives last (it says so through shared memory) resets the counter for the next launch and,
        after an acquire fence, sums the pieces from their slots in K order into acc (part: a
        temporary): the same additions whichever CTA arrives last. Only the rows of D (rows_here of
        the tile's) are written and read, in 16-row warp bands. Returns 1 for the last CTA (it
        stores the tile), else 0."""
        mPartials, mCounters, flag = split_inputs
        b, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        start = tile * k_tiles
        first_cta = ((start + 1) * ctas - 1) // units          # the CTA whose run holds unit `start`
        last_cta = ((start + k_tiles) * ctas - 1) // units     # ... and the tile's last unit
        band = consumer_tidx // 32 * 16 < rows_here             # this warp's 16 rows hold rows of D
        if band:
            self._partial_io(mPartials, self._slot(b, start, units, ctas), acc, consumer_tidx, False)
        cute.arch.fence_acq_rel_gpu()        # release: this thread's partial before the count
        epilogue_barrier.arrive_and_wait()   # every consumer thread's partial and fence
        if consumer_tidx == 0:
            arrived = cute.arch.atomic_add(mCounters.iterator + tile, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            last = cutlass.Int32(0)
            if arrived == last_cta - first_cta:
                last = cutlass.Int32(1)
                mCounters[tile] = cutlass.Int32(0)
            flag[0] = last
        epilogue_barrier.arrive_and_wait()
        last = flag[0]   # rewritten only after the next piece's first barrier, which every thread passes after this
        if last != 0:
            cute.arch.fence_acq_rel_gpu()    # acquire: the other pieces' partials after their count
            # every piece from its slot, this CTA's own too (its threads read what they wrote): acc is
            # free for the sum, and one temporary holds a piece (three tiles of registers spilled)
            acc.fill(0.0)
            if band:
                for other in cutlass.range(first_cta, last_cta + 1, unroll=1):
                    self._partial_io(mPartials, self._slot(other, start, units, ctas), part, consumer_tidx, True)
                    for i in cutlass.range_constexpr(cute.size(acc)):
                        acc[i] = acc[i] + part[i]
        return last

    @cute.jit
    def _slot(self, cta, start, units, ctas):
        """The workspace slot of CTA cta's piece of the tile whose first unit is `start`: 0 when its
        run begins inside that tile (the first piece of its run), 1 when it began before (the last)."""
        slot = STREAMK_SLOTS * cta + 1
        if cta * units // ctas >= start:
            slot = STREAMK_SLOTS * cta
        return slot

    @cute.jit
    def _partial_io(self, mPartials, slot, frag, consumer_tidx, load: cutlass.Constexpr):
        """One piece's FP32 partial between the registers (frag) and its workspace slot, 128 bits at a
        time: the slot holds the fragments in thread order, element i of consumer thread t at
        (i // 4 * threads + t) * 4 + i % 4, so each warp's vector access is one contiguous 512 bytes."""
        threads = self.warpgroups * WARPGROUP_THREADS
        vectors = cute.size(frag) // 4
        offset = cutlass.Int64(slot) * (self.tile_m * self.tile_n) + cutlass.Int64(consumer_tidx * 4)
        gP = cute.make_tensor(mPartials.iterator + cute.assume(offset, divby=4),
                              cute.make_layout((4, vectors), stride=(1, threads * 4)))
        rP = cute.make_tensor(frag.iterator, cute.make_layout((4, vectors), stride=(1, 4)))
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.acc_dtype, num_bits_per_copy=128)
        for j in cutlass.range_constexpr(vectors):
            if cutlass.const_expr(load):
                cute.copy(atom, gP[(None, j)], rP[(None, j)])
            else:
                cute.copy(atom, rP[(None, j)], gP[(None, j)])

    @cute.jit
    def _mainloop(self, ab_pipeline, k_tiles, mmas, tCrA, tCrB, sSFA, mSFB, accs, tmps, row0, block_lo, block_hi, split,
                  my_turn, other_turn, state, l_b, active0, active1):
        """One pass over K for the tile: per K tile, the wgmmas of each active half (B of group l_b)
        into the temporary, then its promotion into that half's accumulator. active0/1: Python True
        for every layout but the contiguous one with 256-row tiles, where a pass computes the halves
        of its group only. The tensor core idles unless a warpgroup issues its next K tile before
        the other's MMAs finish, so the path from a wait to the next issue holds the promotion only:
        the next K tile's B scales, stage barrier test and state are prepared while the last half's
        MMAs run. Returns the advanced state for the caller to rebind."""
        active = (active0, active1)
        sfb_lo, sfb_hi = self._sfb(mSFB, block_lo, block_hi, 0, l_b)
        ready = ab_pipeline.consumer_try_wait(state)
        for k_tile in cutlass.range(k_tiles, unroll=1):
            ab_pipeline.consumer_wait(state, ready)
            following = state.clone()
            following.advance()
            sfb_lo_now, sfb_hi_now = sfb_lo, sfb_hi
            for h in cutlass.range_constexpr(self.halves):
                if active[h]:
                    if cutlass.const_expr(self.order_warpgroups):
                        my_turn.arrive_and_wait()
                    self._mma(mmas, tmps[0], tCrA, tCrB, state.index * self.halves + h, state.index)
                    if cutlass.const_expr(self.order_warpgroups):
                        other_turn.arrive()
                    if cutlass.const_expr(h == self.halves - 1 and not self.split_groups):
                        # while the MMAs run: the next K tile's B scales and whether its stage landed
                        sfb_lo, sfb_hi = self._sfb(mSFB, block_lo, block_hi, cutlass.min(k_tile + 1, k_tiles - 1), l_b)
                        ready = ab_pipeline.consumer_try_wait(following)
                    scale_a0 = sSFA[h * self.mma_m + row0, 0, state.index]
                    scale_a1 = sSFA[h * self.mma_m + row0 + 8, 0, state.index]
                    warpgroup.wait_group(0)
                    if cutlass.const_expr(h == self.halves - 1 and not self.split_groups):
                        ab_pipeline.consumer_release(state)   # every half of the stage has been read
                    self._retire(accs[h], tmps[0], scale_a0, scale_a1, sfb_lo_now, sfb_hi_now, split, k_tile)
            if cutlass.const_expr(self.split_groups):
                ab_pipeline.consumer_release(state)   # after the last active half, whichever it was
                sfb_lo, sfb_hi = self._sfb(mSFB, block_lo, block_hi, cutlass.min(k_tile + 1, k_tiles - 1), l_b)
                ready = ab_pipeline.consumer_try_wait(following)
            state = following
        return state

    @cute.jit
    def _mainloop_ahead(self, ab_pipeline, k_tiles, mmas, tCrA, tCrB, sSFA, mSFB, accs, tmps, row0, block_lo,
                        block_hi, split, state, l_b, k_first):
        """One pass over K with two K tiles in flight (one 128-row half, mma_ahead): K tile k + 1's
        wgmmas go into the other temporary before K tile k's are waited for and promoted, so the
        tensor core always has queued work and a K tile's MMA latency hides behind the previous
        promotion. Which temporary is which must be static (registers), so K tiles go in pairs; the
        last one or two end the pass without a next issue. Returns the advanced state."""
        ab_pipeline.consumer_wait(state)
        self._mma(mmas, tmps[0], tCrA, tCrB, state.index, state.index)
        k_tile = cutlass.Int32(k_first)
        step = (ab_pipeline, k_tiles, mmas, tCrA, tCrB, sSFA, mSFB, accs[0], row0, block_lo, block_hi, split, l_b)
        for _ in cutlass.range((k_tiles - 1) // 2, unroll=1):
            state, k_tile = self._step_ahead(*step, tmps[0], tmps[1], state, k_tile, True)
            state, k_tile = self._step_ahead(*step, tmps[1], tmps[0], state, k_tile, True)
        if k_tiles % 2 == 0:   # two left: the one in flight in tmps[0] and the last
            state, k_tile = self._step_ahead(*step, tmps[0], tmps[1], state, k_tile, True)
            state, k_tile = self._step_ahead(*step, tmps[1], tmps[0], state, k_tile, False)
        else:
            state, k_tile = self._step_ahead(*step, tmps[0], tmps[1], state, k_tile, False)
        return state

    @cute.jit
    def _step_ahead(self, ab_pipeline, k_tiles, mmas, tCrA, tCrB, sSFA, mSFB, acc, row0, block_lo, block_hi, split,
                    l_b, tmp, tmp_next, state, k_tile, issue_next: cutlass.Constexpr):
        """K tile k_tile (its wgmmas in flight into tmp from `state`): issue the next K tile's into
        tmp_next (issue_next), wait for k_tile's, release its stage, promote. Returns (the next
        state, k_tile + 1)."""
        sfb_lo, sfb_hi = self._sfb(mSFB, block_lo, block_hi, k_tile, l_b)
        scale_a0 = sSFA[row0, 0, state.index]
        scale_a1 = sSFA[row0 + 8, 0, state.index]
        following = state.clone()
        following.advance()
        if cutlass.const_expr(issue_next):
            ab_pipeline.consumer_wait(following)
            self._mma(mmas, tmp_next, tCrA, tCrB, following.index, following.index)
            warpgroup.wait_group(1)
        else:
            warpgroup.wait_group(0)
        ab_pipeline.consumer_release(state)
        self._retire(acc, tmp, scale_a0, scale_a1, sfb_lo, sfb_hi, split, k_tile)
        return following, k_tile + 1

    @cute.jit
    def _sfb(self, mSFB, block_lo, block_hi, k_tile, l_b):
        """B's scales of K tile k_tile for the tile's column blocks (the same block twice for tiles
        within one 128-column block)."""
        lo = mSFB[block_lo, k_tile, l_b]
        hi = lo
        if cutlass.const_expr(self.tile_n > BLOCK):
            hi = mSFB[block_hi, k_tile, l_b]
        return lo, hi

    @cute.jit
    def _mma(self, mmas, tmp, tCrA, tCrB, a_stage, b_stage):
        """Start one half's K-tile wgmmas (four k32 steps) into tmp, the first overwriting it."""
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(mmas[min(kb, 1)], tmp, tCrA[(None, None, kb, a_stage)], tCrB[(None, None, kb, b_stage)], tmp)
        warpgroup.commit_group()

    @cute.jit
    def _retire(self, acc, tmp, scale_a0, scale_a1, sfb_lo, sfb_hi, split, k_tile):
        """Promote a finished K tile: acc += tmp * scale_a[row] * scale_b[block], in FP32 FFMA, once
        per 128 K elements."""
        # rows: r = 0 / 1 of the accumulator; blocks: columns before / after `split`
        lo0, lo1, hi0, hi1 = scale_a0 * sfb_lo, scale_a1 * sfb_lo, scale_a0 * sfb_hi, scale_a1 * sfb_hi
        if cutlass.const_expr(self.unscaled_k_tile >= 0):
            if k_tile == self.unscaled_k_tile:
                lo0, lo1, hi0, hi1 = (cutlass.Float32(1.0),) * 4
        if cutlass.const_expr(self.tile_n > BLOCK):
            # the split is 128 or 64 columns for a 192-wide tile: one unrolled loop each
            if split == BLOCK:
                self._promote(acc, tmp, lo0, lo1, hi0, hi1, BLOCK)
            else:
                self._promote(acc, tmp, lo0, lo1, hi0, hi1, self.tile_n - BLOCK)
        else:
            self._promote(acc, tmp, lo0, lo1, hi0, hi1, self.tile_n)

    @cute.jit
    def _promote(self, rAcc, tmp, lo0, lo1, hi0, hi1, split: cutlass.Constexpr):
        # accumulator element i = (c, r, j) = i % 2, i // 2 % 2, i // 4 sits in row r*8 + lane/4 and
        # column j*8 + lane%4*2 + c; `split` is a multiple of 8, so the block depends on j alone
        for i in cutlass.range_constexpr(cute.size(rAcc)):
            row, column_group = i // 2 % 2, i // 4
            if cutlass.const_expr(column_group * 8 < split):
                rAcc[i] = rAcc[i] + tmp[i] * (lo0 if row == 0 else lo1)
            else:
                rAcc[i] = rAcc[i] + tmp[i] * (hi0 if row == 0 else hi1)


def compile_for(arch: str = "sm_90a", layout: str = "normal", groups: int = 1, tile_n: int = 128, cluster_mn=(2, 1),
                sms: int = 132, tile_m: int = 128, **variant):
    """Compile with fake tensors (no GPU needed), keeping PTX and cubin. Every shape and stride is
    dynamic, as at run time (`_views`): one compile serves every M, N, K and group count (and, with
    streamk=True, every CTA count)."""
    from cutlass.runtime import make_fake_stream

    Fp8BlockScaleGemm.can_implement(layout, variant.get("a_rows") or MMA_M, 128, BLOCK, groups, tile_n, cluster_mn, tile_m,
                                    variant.get("streamk", False), variant.get("a_rows"))
    e4m3, f32 = cutlass.Float8E4M3FN, cutlass.Float32
    # the types of the run-time views exactly (the kernel is compiled from those at run time)
    tensors = (fake_tensor(e4m3, 1, aligned=False), fake_tensor(f32, 0, aligned=False), fake_tensor(e4m3, 1, aligned=False),
               fake_tensor(f32, 1, aligned=False), fake_tensor(cutlass.BFloat16, 1, aligned=False),
               fake_tensor(cutlass.Int32, 0, rank=1, aligned=False), fake_tensor(f32, 0, rank=1, aligned=False),
               fake_tensor(cutlass.Int32, 0, rank=1, aligned=False))
    op = Fp8BlockScaleGemm(layout, tile_n, cluster_mn, tile_m=tile_m, **variant)
    return cute.compile(op, *tensors, cutlass.Int32(sms), sms // (cluster_mn[0] * cluster_mn[1]), make_fake_stream(),
                        options=f"--gpu-arch {arch} --keep-ptx --keep-cubin --dump-dir {DUMP_DIR}")


def compile_gemm(a, sfa, b, sfb, layout: str = "normal", group_info=None, tile_n: int | None = None,
                 cluster_mn=None, swizzle: int = 1, tile_m: int | None = None, streamk: bool | None = None,
                 ctas: int | None = None, a_rows: int | None = None, **variant):
    """For torch tensors (see the module docstring for each layout's shapes): (run, d), where run()
    computes d on the current stream, into the same d. group_info: m_indices (contiguous) or
    masked_m (masked), int32 on the device. tile_m, tile_n, cluster_mn, streamk and a_rows default to
    `choose_tiling` (streamk and short A only where the whole tiling is the chooser's; otherwise off);
    ctas: the CTAs that share a stream-K launch (default: one per SM, at most one per unit of work).
    `variant` reaches Fp8BlockScaleGemm (the negative control, the warpgroup turn-taking switch).
    The kernel is compiled once per layout, tiling and variant, with dynamic shapes and strides,
    and reused for every shape. Stream-K owns a workspace (partials, and counters the kernel leaves
    at zero): run() must not execute concurrently with itself (two streams, or two graphs replayed
    at once); keep run alive as long as a CUDA graph captured from it."""
    import torch

    a, sfa, b, sfb = canonical(a, -1), canonical(sfa, -2), canonical(b, -1), canonical(sfb, -1)
    _check_tensors(a, sfa, b, sfb, layout, group_info)
    groups = b.shape[0] if b.dim() == 3 else 1
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-2]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    chosen = choose_tiling(layout, m, n, sms, groups, k=k)
    tiling = {"tile_m": tile_m or chosen["tile_m"], "tile_n": tile_n or chosen["tile_n"],
              "cluster_mn": tuple(cluster_mn or chosen["cluster_mn"])}
    choosers = all(tiling[key] == chosen[key] for key in tiling)
    if streamk is None:
        streamk = chosen["streamk"] and choosers
    if a_rows is None:
        a_rows = chosen["a_rows"] if choosers else tiling["tile_m"]
    tile_m, tile_n, cluster_mn = tiling["tile_m"], tiling["tile_n"], tiling["cluster_mn"]
    Fp8BlockScaleGemm.can_implement(layout, m, n, k, groups, tile_n, cluster_mn, tile_m, streamk, a_rows)
    d = torch.empty(*a.shape[:-1], n, dtype=torch.bfloat16, device=a.device)
    if group_info is None:
        group_info = torch.zeros(1, dtype=torch.int32, device=a.device)
    units = streamk_units(m, n, k, tile_m, tile_n)
    ctas = min(ctas or sms, units, MAX_STREAMK_CTAS) if streamk else 0
    if ctas < 0:
        raise ValueError(f"ctas={ctas}: give a positive CTA count")
    # stream-K's workspace: a slot per (CTA, first or last piece of its run), a counter per output tile
    # (zeroed once; the kernel resets each after its tile is summed); stand-ins of one element without
    workspace = (torch.empty(max(1, STREAMK_SLOTS * ctas * tile_m * tile_n), dtype=torch.float32, device=a.device),
                 torch.zeros(max(1, units // (k // BLOCK)) if streamk else 1, dtype=torch.int32, device=a.device))
    views = _views(a, sfa, b, sfb, d, group_info) + [cute_view(t, 0) for t in workspace]
    props = torch.cuda.get_device_properties(a.device)
    clusters = max_active_clusters(cluster_mn)
    key = ("fp8_blockscale_gemm", layout, tile_m, tile_n, cluster_mn, swizzle, streamk, a_rows,
           tuple(sorted(variant.items())), clusters, f"sm_{props.major}{props.minor}")
    op = Fp8BlockScaleGemm(layout, tile_n, cluster_mn, swizzle, tile_m, streamk=streamk, a_rows=a_rows, **variant)
    kernel = cached_kernel(key, lambda: cute.compile(op, *views, cutlass.Int32(max(ctas, 1)), clusters,
                                                     current_stream()), KERNEL_SOURCES)
    count = cutlass.Int32(max(ctas, 1))

    def run():
        """Launch on the stream current now (read at every launch, so run() can be captured in a CUDA
        graph on a side stream); the workspace lives as long as run."""
        kernel(*views, count, current_stream())
    run.workspace = workspace
    run.tiling = {**tiling, "streamk": streamk, "ctas": ctas, "a_rows": a_rows}
    return run, d


def streamk_units(m: int, n: int, k: int, tile_m: int, tile_n: int) -> int:
    """Units of stream-K work of an M x N x K problem: output tiles x K tiles."""
    return -(-m // tile_m) * -(-n // tile_n) * (k // BLOCK)


def choose_tiling(layout: str, m: int, n: int, sms: int, groups: int = 1, tile_ms: tuple[int, ...] = TILE_MS,
                  k: int | None = None) -> dict:
    """{tile_m, tile_n, cluster_mn, streamk, a_rows} for an M x N output (M: rows per group for masked, all rows
    otherwise): the tile with the lowest estimated time, waves of tiles on `sms` SMs times the
    layout's tile cost (ties go to the larger tile), and a 1x2 cluster (two N tiles sharing A) from
    CLUSTER_FROM_M rows on, none below, where only tiles with K tiles in flight are weighed.
    Given K (normal layout, up to STREAM_MAX_M rows, where B's bytes set the time), the streaming
    model (stream_estimate) picks among 64-row tiles STREAM_TILE_NS wide, data-parallel or stream-K
    (ties to data-parallel).
    tile_ms: the tile heights to choose from (the probe times the best 128-row tile beside)."""
    cluster = (1, 2) if m >= CLUSTER_FROM_M else (1, 1)
    costs = {"contiguous": CONTIGUOUS_TILE_COST, "masked": MASKED_TILE_COST}.get(layout, TILE_COST)

    def estimate(tile: tuple[int, int]) -> tuple[float, int]:
        tile_m, tile_n = tile
        tiles_n = -(-n // tile_n)
        tiles_n += tiles_n % cluster[1]   # a 1x2 cluster also runs (and discards) a tile past an odd count
        tiles = -(-m // tile_m) * (groups if layout == "masked" else 1) * tiles_n
        return -(-tiles // sms) * costs[tile], -tile_m * tile_n

    # few rows: only tiles with K tiles in flight (128 x 192 at 128 x 24576 x 1536 timed at 0.91 of 128 x 64)
    few_rows = m < CLUSTER_FROM_M
    tiles = [t for t in costs if t[0] in tile_ms and not (few_rows and (t[0] > MMA_M or t[1] > MMA_AHEAD_MAX_N))]
    if not tiles:
        raise ValueError(f"tile_ms={tuple(tile_ms)}: no tile of those heights for the {layout} layout with M={m} "
                         f"(offered: {sorted({t[0] for t in costs if not few_rows or t[0] <= MMA_M})})")
    best = min(tiles, key=estimate)
    choice = {"tile_m": best[0], "tile_n": best[1], "cluster_mn": cluster, "streamk": False, "a_rows": best[0]}
    if k is not None and layout == "normal" and m <= STREAM_MAX_M and k >= BLOCK and 64 in tile_ms:
        a_rows = 64   # full A stages: what the model was fitted on
        options = [(tile_n, streamk) for tile_n in STREAM_TILE_NS for streamk in (False, True)]
        tile_n, streamk = min(options, key=lambda o: (stream_estimate(m, n, k, o[0], o[1], a_rows, sms), o[1]))
        choice = {"tile_m": 64, "tile_n": tile_n, "cluster_mn": (1, 1), "streamk": streamk, "a_rows": a_rows}
    return _short_a(choice, layout, m)


def stream_estimate(m: int, n: int, k: int, tile_n: int, streamk: bool, a_rows: int, sms: int) -> float:
    """The streaming model's time (microseconds, without the launch) of a 64-row tiling (see STREAM_RATE)."""
    k_tiles = k // BLOCK
    unit_bytes = tile_n * BLOCK
    in_flight = _stages(tile_n, a_rows, streamk) * unit_bytes

    def unit(streaming: int, efficiency: float = 1.0) -> float:
        rate = STREAM_RATE / (streaming + STREAM_N0 * 131072 / in_flight)
        return max(MMA_UNIT_US * tile_n / 128, UNIT_US + unit_bytes / (efficiency * rate))

    tiles = -(-m // 64) * -(-n // tile_n)
    if not streamk:   # waves of tiles: the last one streams with fewer SMs, each faster
        return sum(k_tiles * unit(min(sms, tiles - w)) for w in range(0, tiles, sms))
    units = tiles * k_tiles
    ctas = min(sms, units)
    shared = any(b * units // ctas % k_tiles for b in range(1, ctas))
    return -(-units // ctas) * unit(ctas, STREAMK_EFFICIENCY) + (STREAMK_PIECE_US if shared else 0.0)


@functools.lru_cache(maxsize=None)
def _stages(tile_n: int, a_rows: int, streamk: bool) -> int:
    return Fp8BlockScaleGemm("normal", tile_n, (1, 1), tile_m=64, streamk=streamk, a_rows=a_rows).stages


def _short_a(choice: dict, layout: str, m: int) -> dict:
    """The choice's A stages: full (a_rows = tile_m). Short A is opt-in (compile_gemm's a_rows): it
    compiles and is tested on the CPU, and no H200 run has timed or checked it yet."""
    choice["a_rows"] = choice["tile_m"]
    return choice


def gemm(a, sfa, b, sfb, layout: str = "normal", group_info=None):
    """D for torch tensors, in a new bf16 tensor; compiled once per shape and layout, then reused."""
    run, d = compile_gemm(a, sfa, b, sfb, layout, group_info)
    run()
    return d


KERNEL_SOURCES = [Path(__file__).resolve(), *(Path(module.__file__).resolve() for module in (gemm_base, pipeline_checks, sm90_common))]
"""The files whose bytes key the on-disk kernel cache (the shared Hopper modules named by their import,
not by a path: a path written out broke when the kernel folders became packages)."""


def _check_tensors(a, sfa, b, sfb, layout: str, group_info) -> None:
    """Shapes, dtypes and strides of the torch inputs, with errors that name the tensor."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} unsupported; use one of {LAYOUTS}")
    grouped_a, grouped_b = layout == "masked", layout != "normal"
    for name, t, dtype, dims in (("a", a, torch.float8_e4m3fn, 2 + grouped_a), ("b", b, torch.float8_e4m3fn, 2 + grouped_b),
                                 ("sfa", sfa, torch.float32, 2 + grouped_a), ("sfb", sfb, torch.float32, 2 + grouped_b)):
        if t.dtype != dtype or t.dim() != dims:
            raise ValueError(f"{name}: expected a {dims}-D {dtype} tensor for the {layout} layout; "
                             f"got {t.dim()}-D {t.dtype}")
        if not t.is_cuda:
            raise ValueError(f"{name}: must be on the GPU")
    m, k = a.shape[-2:]
    n = b.shape[-2]
    kb = k // BLOCK
    if b.shape[-1] != k:
        raise ValueError(f"a is (..., {m}, {k}) and b (..., {n}, {b.shape[-1]}): K differs")
    for name, t in (("a", a), ("b", b)):
        if t.stride(-1) != 1:
            raise ValueError(f"{name}: K must be contiguous (strides {t.stride()}); call .contiguous()")
        if any(stride % 16 for stride in t.stride()[:-1]):
            raise ValueError(f"{name}: strides {t.stride()} must be multiples of 16 elements (16 bytes) for TMA")
    if tuple(sfa.shape[-2:]) != (m, kb) or sfa.stride(-2) != 1 or any(stride % 4 for stride in sfa.stride()[:-2] +
                                                                         sfa.stride()[-1:]):
        raise ValueError(f"sfa: expected shape (..., {m}, {kb}) stored M-major with K-block and group strides that are "
                         f"multiples of 4; got {tuple(sfa.shape)} strides {sfa.stride()} (use quantize.per_token_cast)")
    if grouped_a and sfa.shape[0] != a.shape[0]:
        raise ValueError(f"a has {a.shape[0]} groups and sfa {sfa.shape[0]}")
    for name, t in (("a", a), ("b", b), ("sfa", sfa), ("sfb", sfb), ("group_info", group_info)):
        if t is not None and t.data_ptr() % 16:
            raise ValueError(f"{name}: its data must start on a 16-byte boundary (address {t.data_ptr():#x})")
    n_blocks = -(-n // BLOCK)
    if tuple(sfb.shape[-2:]) != (n_blocks, kb) or sfb.stride(-1) != 1:
        raise ValueError(f"sfb: expected shape (..., {n_blocks}, {kb}), K-block contiguous; got {tuple(sfb.shape)} "
                         f"strides {sfb.stride()} (use quantize.per_block_cast)")
    if grouped_b and b.shape[0] != sfb.shape[0]:
        raise ValueError(f"b has {b.shape[0]} groups and sfb {sfb.shape[0]}")
    if layout == "normal":
        if group_info is not None:
            raise ValueError("group_info is for the grouped layouts only")
        return
    expected = (m,) if layout == "contiguous" else (b.shape[0],)
    if (group_info is None or group_info.dtype != torch.int32 or tuple(group_info.shape) != expected
            or group_info.stride(0) != 1):
        what = "m_indices (M,)" if layout == "contiguous" else "masked_m (G,)"
        got = None if group_info is None else f"{tuple(group_info.shape)} {group_info.dtype} stride {group_info.stride()}"
        raise ValueError(f"group_info: the {layout} layout needs {what} int32 = {expected}, stride 1; got {got}")
    if layout == "masked" and a.shape[0] != b.shape[0]:
        raise ValueError(f"a has {a.shape[0]} groups and b {b.shape[0]}")


def _views(a, sfa, b, sfb, d, group_info) -> list:
    """CuTe views with dynamic shapes and strides (the types `_fake` declares at compile time).
    A static extent of 1 would let CuTe drop that mode when it builds a TMA atom (M = 1 gave a 1-D
    TMA for A and D, and a crash); dynamic extents keep every mode whatever its run-time size."""
    return [cute_view(batch_last(a), 1), cute_view(batch_last(sfa), 0), cute_view(batch_last(b), 1),
            cute_view(batch_last(sfb), 1), cute_view(batch_last(d), 1), cute_view(group_info, 0)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--layout", default="normal", choices=LAYOUTS)
    args = parser.parse_args()
    compile_for(args.arch, args.layout, groups=1 if args.layout == "normal" else 4,
                cluster_mn=(2, 1) if args.layout == "normal" else (1, 2))
    print(f"compiled the {args.layout} layout for {args.arch}")
