"""How a launch of our Hopper GEMM is configured, and the rule that picks the configuration: plain
Python (no CuTe DSL, no torch), imported by the kernel (gemm_sm90.py), the compile cache (jit.py), the
host interface (hopper_gemm.py) and tune=True (autotune.py) alike.

GemmConfig is one launch's settings; choose_config(m, n, k, batch, sms, ab_bits) picks them from the
waves of output tiles on the SMs (swap-AB for decode shapes where swap_ab_pays), and split_workspace
says what a split-K launch allocates beside its output.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

WGMMA_M = 64            # rows of one warpgroup's wgmma
K_TILE_BYTES = 128      # one 128-byte swizzle row of K per stage: 64 bf16/fp16, 32 tf32 or 128 fp8 elements
TILE_MS = (64, 128, 192)        # 64 rows per consumer warpgroup on a tile: one, two or three of them
TILE_NS = (64, 128, 192, 256)   # the widths of ping-pong and of the fused epilogue, and of unswapped candidates
TILE_N_STEP = 16
TILE_WIDTHS = tuple(range(TILE_N_STEP, 256 + 1, TILE_N_STEP))
"""Every tile width of the cooperative schedule with the plain epilogue: wgmma's N is any multiple of 8 up
to 256, and the epilogue's slices are 32 or 16 columns wide (epilogue_slice_n), so a swapped problem's
tile can be sized to its token rows (80 for 160 of them in two tiles, 208 for 200 in one)."""
MAX_TILE_N = 256
MAX_TILE_N_192 = 192            # three consumer warpgroups: 96 accumulator registers per thread at most
EPI_TILE_N = 32                 # gemm_base.EPI_TILE_N (plain Python here: config imports no CuTe DSL)
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


COST_MODEL_FILE = Path(__file__).resolve().parent / "cost_model_h200.json"
COST_TERMS = ("launch_us", "tile_us", "mma_us", "narrow_n", "load_us", "epilogue_us", "reduce_us", "hbm_us",
              "reread", "rows192", "swap")
"""The cost model's terms, in microseconds unless said (fit.py fits them to the sweep's table):
launch_us    a launch, whatever it does;   tile_us  a work tile's fixed cost (setup, barriers, the wait
             for its first stage);
mma_us       one K tile of wgmma per 64 x 64 of tile area (a 128 x 256 tile: 8 of them);
narrow_n     columns of wgmma overhead per instruction (a narrow tile issues more, each doing less);
load_us      one K tile's loads per KiB a CTA receives (TMA into shared memory; multicast halves a share);
epilogue_us  per 64 x 64 of tile area through the epilogue;
reduce_us    per 64 x 64 of a split's FP32 partial, written and read back by split-K;
hbm_us       per MiB moved through HBM (the memory floor): A, B and D once, and each re-read of an operand
             tile by another CTA (one per column tile of A, row tile of B, less what multicast shares)
             times `reread`, the share of re-reads the L2 does not catch;
rows192      factor on a 192-row tile's wgmma (three consumer warpgroups share the issue slots);
swap         factor on a swapped tile's wgmma."""


SOFT_MAX = 3   # the exponent of the smooth maximum of the tiles' time and the memory floor


def _load_cost_model(path: Path) -> dict[str, float]:
    """The fitted terms from `path` (fit.py writes it): every term of COST_TERMS, a positive finite number."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: the chooser's cost model is unreadable ({err})") from None
    terms = data.get("terms") if isinstance(data, dict) else None
    if not isinstance(terms, dict) or set(terms) != set(COST_TERMS) or not all(
            type(v) in (int, float) and 0 < v < math.inf for v in terms.values()):
        raise ValueError(f"{path}: 'terms' must hold exactly {COST_TERMS}, each a positive finite number")
    return {name: float(terms[name]) for name in COST_TERMS}


COST = _load_cost_model(COST_MODEL_FILE)


def predicted_us(config: GemmConfig, m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16,
                 cost: dict[str, float] | None = None) -> float:
    """The cost model's time of `config` on an (L x) M x N x K problem: the waves of work tiles over the
    SMs (clusters placed whole) times one work tile's time (a fixed cost, its K range's steps, each the
    larger of its wgmma and its loads, the epilogue, the split-K partial), or the time to move A, B and
    D through HBM once where that is longer (a smooth maximum of the two), plus a launch. `cost`: other terms than COST (fit.py's trials)."""
    c = COST if cost is None else cost
    km, kn = (n, m) if config.swap_ab else (m, n)
    tile_m, tile_n = config.tile_m, config.tile_n
    cm, cn = config.cluster_mn
    k_tiles = math.ceil(k * ab_bits / 8 / K_TILE_BYTES)
    steps = math.ceil(k_tiles / config.split_k)
    tiles_m, tiles_n = -(-math.ceil(km / tile_m) // cm) * cm, -(-math.ceil(kn / tile_n) // cn) * cn
    clusters = tiles_m * tiles_n * batch * config.split_k // (cm * cn)
    waves = math.ceil(clusters / max(1, sms // (cm * cn)))
    area = tile_m * tile_n / 4096
    mma = c["mma_us"] * tile_m * (tile_n + c["narrow_n"]) / 4096   # a K tile is 128 bytes deep: the same time per type
    mma *= (c["rows192"] if tile_m == 3 * WGMMA_M else 1.0) * (c["swap"] if config.swap_ab else 1.0)
    load = c["load_us"] * (tile_m / cn + tile_n / cm) * K_TILE_BYTES / 1024
    tile = c["tile_us"] + steps * max(mma, load) + c["epilogue_us"] * area
    if config.split_k > 1:
        tile += c["reduce_us"] * area * config.split_k
    a_reads = 1 + (math.ceil(kn / tile_n) / cn - 1) * c["reread"]   # the kernel's A, read once per column tile
    b_reads = 1 + (math.ceil(km / tile_m) / cm - 1) * c["reread"]
    moved = ((km * k * a_reads + kn * k * b_reads) * ab_bits / 8 + m * n * 2) * batch / 2 ** 20
    # the larger of the two, smoothly (a kernel near its memory floor still gains from faster tiles)
    return c["launch_us"] + ((waves * tile) ** SOFT_MAX + (c["hbm_us"] * moved) ** SOFT_MAX) ** (1 / SOFT_MAX)


@functools.lru_cache(maxsize=4096)
def choose_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16,
                  allow_split: bool = True, allow_swap: bool = False, fused: bool = False) -> GemmConfig:
    """The configuration for an (L x) M x N x K problem on a GPU with `sms` SMs: of candidates(), the one
    the cost model (predicted_us, fitted to the H200 sweep) gives the least time. allow_swap: the
    caller's settings permit swap-AB (a 16-bit D, no fused epilogue, the cooperative schedule), which
    SWAP_AB_AUTO switches on; allow_split=False or fused (a fused epilogue) keep K whole."""
    found = candidates(m, n, k, batch, sms, ab_bits, allow_split and not fused, allow_swap and SWAP_AB_AUTO, fused)
    return min(found, key=lambda c: predicted_us(c, m, n, k, batch, sms, ab_bits))


def swapped_config(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16) -> GemmConfig:
    """The swapped configuration the cost model prefers (what swap_ab=True runs when nothing is forced)."""
    found = [c for c in candidates(m, n, k, batch, sms, ab_bits, allow_swap=True) if c.swap_ab]
    return min(found, key=lambda c: predicted_us(c, m, n, k, batch, sms, ab_bits))


def ranked(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16, allow_swap: bool = True,
           count: int | None = None) -> list[GemmConfig]:
    """The candidates, fastest predicted first (the first is choose_config's pick with the same
    settings), the first `count` of them."""
    found = candidates(m, n, k, batch, sms, ab_bits, allow_swap=allow_swap and SWAP_AB_AUTO)
    return sorted(found, key=lambda c: predicted_us(c, m, n, k, batch, sms, ab_bits))[:count]


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


def wave_widths(rows: int, n: int, sms: int, narrowest: int, widest: int) -> set[int]:
    """Tile widths (multiples of 16) that make `rows` row tiles x ceil(n / width) column tiles fill one or
    two whole waves of `sms` as nearly as they can: 128 x 144 tiles put 384 x 6144 in 129 of 132 SMs,
    where 128-wide ones need 144 (cuBLAS picks such widths: issue 34's table)."""
    out = set()
    for waves in (1, 2):
        columns = waves * sms // max(1, rows)
        if columns >= 1:
            width = -(-math.ceil(n / columns) // TILE_N_STEP) * TILE_N_STEP
            if narrowest <= width <= widest:
                out.add(width)
    return out


def candidates(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16, allow_split: bool = True,
               allow_swap: bool = False, fused: bool = False) -> list[GemmConfig]:
    """Every configuration the chooser considers for an (L x) M x N x K problem (and tune=True times the
    best-ranked of): unswapped tiles of 64, 128 or 192 rows by 64, 128, 192 or 256 columns or a width
    that fills whole waves (wave_widths), in a 1x1 or (two row tiles or more) 2x1 cluster; swapped (allow_swap) tiles of 64 or 128 weight rows by a width sized to
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
        if (tile_m == 3 * WGMMA_M and (m <= 2 * WGMMA_M or fused)) or (tile_m == WGMMA_M and m > 4 * WGMMA_M):
            continue   # a third of a 192-row tile or less used (192 rows: the plain epilogue only); 64-row tiles where 128 rows fill
        widest = MAX_TILE_N_192 if tile_m == 3 * WGMMA_M else MAX_TILE_N
        for tile_n in sorted(set(TILE_NS) | wave_widths(math.ceil(m / tile_m) * batch, n, sms, 4 * 16, widest)):
            if tile_n <= widest and not (fused and tile_n not in TILE_NS):
                add(m, n, tile_m, tile_n, False)
    if allow_swap and not fused:
        widths = sorted({min(MAX_TILE_N, -(-math.ceil(m / parts) // TILE_N_STEP) * TILE_N_STEP) for parts in (1, 2, 3, 4)})
        for tile_m in (WGMMA_M, 2 * WGMMA_M):
            for tile_n in widths:
                add(n, m, tile_m, tile_n, True)
    return out
