"""How a launch of our Hopper GEMM is configured, and the rule that picks the configuration: plain
Python (no CuTe DSL, no torch), imported by the kernel (gemm_sm90.py), the compile cache (jit.py), the
host interface (hopper_gemm.py) and tune=True (autotune.py) alike.

GemmConfig is one launch's settings; choose_config(m, n, k, batch, sms, ab_bits) picks them from the
waves of output tiles on the SMs (swap-AB for decode shapes where swap_ab_pays), and split_workspace
says what a split-K launch allocates beside its output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

WGMMA_M = 64            # rows of one warpgroup's wgmma
K_TILE_BYTES = 128      # one 128-byte swizzle row of K per stage: 64 bf16/fp16, 32 tf32 or 128 fp8 elements
TILE_MS = (64, 128, 192)        # 64 rows per consumer warpgroup on a tile: one, two or three of them
TILE_NS = (64, 128, 192, 256)   # the widths of ping-pong, and what the unswapped rule picks from
TILE_N_STEP = 16
TILE_WIDTHS = tuple(range(TILE_N_STEP, 256 + 1, TILE_N_STEP))
"""Every tile width of the cooperative schedule with the plain epilogue: wgmma's N is any multiple of 8 up
to 256, and the epilogue's slices are 32 or 16 columns wide (epilogue_slice_n), so a swapped problem's
tile can be sized to its token rows (80 for 160 of them in two tiles, 208 for 200 in one)."""
MAX_TILE_N = 256
MAX_TILE_N_192 = 192            # three consumer warpgroups: 96 accumulator registers per thread at most
EPI_TILE_N = 32
# narrow tiles for the swapped decode problem's small side (a few token rows as the kernel's N): less
# padded shared memory per stage; the epilogue slice is then the whole tile width
NARROW_TILE_NS = (16, 32)
CLUSTERS = ((1, 1), (2, 1), (1, 2))
MAX_SPLIT_K = 16
PINGPONG_TILE_M = WGMMA_M   # a ping-pong warpgroup owns a whole tile: one 64-row wgmma per K block
# swap_ab=None picks swap-AB by choose_config's rule (swap_ab_pays) where this is True: switched on after
# probe-decode-gemm's H200 run 20261201T193723Z, where the in-kernel swap beat the unswapped choice at
# every M from 1 to 64 on both weights (and the split-K sum the unswapped choice needs cost the most)
SWAP_AB_AUTO = True
SWAP_MIN_SM_SHARE = 3
"""Swap only where the swapped tiles (64 weight rows each, no split-K) put at least 1 / this of the SMs to
work: each CTA then streams its own slice of the weight, and too few cannot pull the HBM's bandwidth
(measured: 64 CTAs on 132 SMs streamed a 4096 x 14336 weight at about cuBLAS's rate)."""


def epilogue_slice_n(tile_n: int) -> int:
    """The columns of one epilogue slice (D through shared memory and a TMA store): 32 where they divide
    the tile width, else 16 (every width is a multiple of 16)."""
    return EPI_TILE_N if tile_n % EPI_TILE_N == 0 else min(tile_n, TILE_N_STEP)


@dataclass(frozen=True)
class GemmConfig:
    """The settings of one launch. tile_m, tile_n, cluster_mn and swizzle are compile-time (one compiled
    kernel each), and whether split_k is above 1 (the kernel that reduces its splits); split_k itself,
    like the shapes and strides, is a run-time value. swap_ab: the kernel runs on (b, a) into out^T, so
    tile_m, tile_n and cluster_mn are of that swapped problem (tile_m over the user's N, tile_n over M)."""
    tile_m: int = 128
    tile_n: int = 256
    cluster_mn: tuple[int, int] = (2, 1)
    split_k: int = 1
    swizzle: int = 1
    schedule: str = "cooperative"
    swap_ab: bool = False

    def describe(self) -> str:
        schedule = ", ping-pong" if self.schedule == "pingpong" else ""
        swap = ", swap-AB" if self.swap_ab else ""
        return (f"tile {self.tile_m}x{self.tile_n}, cluster {self.cluster_mn[0]}x{self.cluster_mn[1]}, "
                f"split-k {self.split_k}{schedule}{swap}")


# Relative time of one output tile per unit of area, by tile width: narrow tiles reload A more often
# per output column and spend more of their time in the epilogue. Fitted to H200 timings of forced
# configurations (scratch runs, 2026-12-01): at 1024x4096x4096 a 64-wide tile took 1.56x the time of
# the 256-wide one at equal area, and 128x192 lost to 128x64 at 1024x2112x7168.
TILE_N_COST = {64: 1.8, 128: 1.12, 192: 1.1, 256: 1.0}
SPLIT_MIN_K_TILES = 64   # below this many K tiles the split-K sum costs more than the SMs it fills
SPLIT_K_TILES_PER_RANGE = 16


def choose_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16,
                  allow_split: bool = True, allow_swap: bool = False) -> GemmConfig:
    """The configuration for an (L x) M x N x K problem on a GPU with `sms` SMs: the unswapped one
    (_unswapped_config), or, where allow_swap (the caller's settings permit it) and SWAP_AB_AUTO, the
    swapped one (swapped_config) where swap_ab_pays."""
    unswapped = _unswapped_config(m, n, k, batch, sms, ab_bits, allow_split)
    if allow_swap and SWAP_AB_AUTO and swap_ab_pays(m, n, batch, sms, unswapped):
        return swapped_config(m, n, k, batch, sms, ab_bits)
    return unswapped


def swapped_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16) -> GemmConfig:
    """The configuration of the swapped problem (the kernel's M is n, its N is m; never split).
    M <= 64: the narrowest tile width that holds the M rows (16, 32 or 64: the least padding of the
    wgmma's N side and of B's stage), 128-row tiles over N when they alone fill the SMs, else 64-row
    ones (twice the CTAs streaming the weight). M > 64: choose_config's pick for the swapped shape."""
    if m > WGMMA_M:
        return replace(_unswapped_config(n, m, k, batch, sms, ab_bits, allow_split=False), swap_ab=True)
    tile_n = min(w for w in NARROW_TILE_NS + TILE_NS if w >= m)
    tile_m = 128 if math.ceil(n / 128) * batch >= sms else WGMMA_M
    return GemmConfig(tile_m, tile_n, (1, 1), 1, swap_ab=True)


def swap_ab_pays(m: int, n: int, batch: int, sms: int, unswapped: GemmConfig) -> bool:
    """Whether swap-AB should beat the unswapped configuration, from counts and no timing: the tokens
    (M <= 64) fit one 64-row wgmma unswapped, where they leave the K loop to few column tiles (and a
    split-K sum to fill the SMs); swapped, they are the narrow N side (16, 32 or 64 wide) and the
    weight's rows fill the 64-row side, N / 64 CTAs each streaming its own slice of the weight with
    no split. Swap where those CTAs are at least 1 / SWAP_MIN_SM_SHARE of the SMs."""
    if m > WGMMA_M or unswapped.tile_m != WGMMA_M:
        return False
    swapped = swapped_config(m, n, 1, batch, sms)
    swapped_ctas = math.ceil(n / swapped.tile_m) * math.ceil(m / swapped.tile_n) * batch
    return SWAP_MIN_SM_SHARE * swapped_ctas >= sms


def _unswapped_config(m: int, n: int, k: int, batch: int, sms: int, ab_bits: int, allow_split: bool) -> GemmConfig:
    """The configuration of the problem as given.

    M <= 64 (decode): one 64-row tile streams B. The widest tile (256, then 128) whose column tiles
    fill three quarters of the SMs; otherwise, for long K, 256-wide tiles with K split over the idle
    SMs (at least 16 K tiles per range); otherwise the width that puts the most CTAs to work.
    M > 64: 128-row tiles, the width minimizing waves x tile cost, a 2x1 cluster (B multicast) when
    the row tiles pair up (an even count), split-K when the tiles fill less than half of the SMs and K
    is long.
    allow_split=False (a fused epilogue, which needs the whole sum): never split K."""
    k_tiles = math.ceil(k * ab_bits / 8 / K_TILE_BYTES)
    if m <= 64:
        def tiles_for(width: int) -> int:
            return math.ceil(n / width) * batch
        for width in (256, 128):
            if tiles_for(width) >= 0.75 * sms:
                return GemmConfig(64, width, (1, 1), 1)
        if allow_split and k_tiles >= SPLIT_MIN_K_TILES:
            split = max(1, min(MAX_SPLIT_K, sms // tiles_for(256), k_tiles // SPLIT_K_TILES_PER_RANGE))
            return GemmConfig(64, 256, (1, 1), split)
        width = max(TILE_NS, key=lambda w: (min(tiles_for(w), sms), w))
        return GemmConfig(64, width, (1, 1), 1)
    tile_m = 128

    def waves(tile_n: int) -> float:
        tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n) * batch
        return math.ceil(tiles / sms) * tile_n * TILE_N_COST[tile_n]

    tile_n = min(TILE_NS, key=lambda t: (waves(t), -t))
    tiles_m = math.ceil(m / tile_m)
    tiles = tiles_m * math.ceil(n / tile_n) * batch
    split_k = 1
    if allow_split and tiles * 2 <= sms and k_tiles >= SPLIT_MIN_K_TILES:
        split_k = max(1, min(MAX_SPLIT_K, sms // tiles, k_tiles // SPLIT_K_TILES_PER_RANGE))
    # a 2x1 cluster pairs row tiles: over an odd count the last pair's second CTA computes a tile
    # wholly outside D (1 / (tiles_m + 1) of the SMs' work wasted: a quarter at three row tiles)
    cluster = (2, 1) if tiles_m >= 2 and tiles_m % 2 == 0 and split_k == 1 else (1, 1)
    return GemmConfig(tile_m, tile_n, cluster, split_k)



def split_workspace(m: int, n: int, batch: int, config: GemmConfig) -> tuple[int, int]:
    """(FP32 partials, Int32 counters) the in-kernel split-K reads and writes, in elements: one whole
    (tile_m, tile_n) block per split of each output tile, in the order (batch, tile_n, tile_m, split),
    and one counter per output tile; (0, 0) without a split."""
    if config.split_k <= 1:
        return 0, 0
    tiles = math.ceil(m / config.tile_m) * math.ceil(n / config.tile_n) * batch
    return tiles * config.split_k * config.tile_m * config.tile_n, tiles


def split_choices(tiles: int, k_tiles: int, sms: int) -> tuple[int, ...]:
    """The split_k values worth trying when `tiles` work tiles (of a cluster-rounded grid) fill under a
    wave of `sms`: the largest split that keeps one wave (floor(sms / tiles)) and half of it, each with
    at least two K tiles per range and at most MAX_SPLIT_K; none when the tiles fill a wave."""
    if tiles >= sms:
        return ()
    fill = min(MAX_SPLIT_K, sms // tiles, k_tiles // 2)
    return tuple(sorted({s for s in (fill, fill // 2) if s >= 2}))


def candidates(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16, allow_split: bool = True,
               allow_swap: bool = False, fused: bool = False) -> list[GemmConfig]:
    """Every configuration the chooser considers for an (L x) M x N x K problem (and tune=True times the
    best-ranked of): unswapped tiles of 64, 128 or 192 rows by 64..256 columns, in a 1x1 or (two row
    tiles or more) 2x1 cluster; swapped (allow_swap) tiles of 64 or 128 weight rows by a width sized to
    the token rows (the tokens in 1..4 column tiles, rounded up to 16), in 1x1, 2x1 or (two token
    tiles or more) 1x2 clusters, the 1x2 pair sharing the weight tile; each also split over K where the
    work tiles fill under a wave (split_choices; allow_split). fused: the fused epilogue's widths only
    (TILE_NS and NARROW_TILE_NS, what it was built for) and no swap."""
    k_tiles = math.ceil(k * ab_bits / 8 / K_TILE_BYTES)
    out = []

    def add(km: int, kn: int, tile_m: int, tile_n: int, swap: bool) -> None:
        tiles_m, tiles_n = math.ceil(km / tile_m), math.ceil(kn / tile_n)
        clusters = [(1, 1)] + [(2, 1)] * (tiles_m >= 2) + [(1, 2)] * (swap and tiles_n >= 2)
        for cm, cn in clusters:
            work = -(-tiles_m // cm) * cm * -(-tiles_n // cn) * cn * batch
            splits = (1,) + (split_choices(work, k_tiles, sms) if allow_split else ())
            out.extend(GemmConfig(tile_m, tile_n, (cm, cn), s, swap_ab=swap) for s in splits)

    for tile_m in TILE_MS:
        if (tile_m == 3 * WGMMA_M and m <= 2 * WGMMA_M) or (tile_m == WGMMA_M and m > 4 * WGMMA_M):
            continue   # a third of a 192-row tile or less used; 64-row tiles where 128 rows fill
        for tile_n in TILE_NS:
            if tile_m != 3 * WGMMA_M or tile_n <= MAX_TILE_N_192:
                add(m, n, tile_m, tile_n, False)
    if allow_swap and not fused:
        widths = sorted({min(MAX_TILE_N, -(-math.ceil(m / parts) // TILE_N_STEP) * TILE_N_STEP) for parts in (1, 2, 3, 4)})
        for tile_m in (WGMMA_M, 2 * WGMMA_M):
            for tile_n in widths:
                add(n, m, tile_m, tile_n, True)
    return out
