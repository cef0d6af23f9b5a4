"""A measured configuration choice for our Hopper GEMM: `gemm(a, b, tune=True)`.

What it does
    For a problem it has not seen, it times choose_config's pick and the other configurations of
    `sweep` (the TUNE_CANDIDATES the chooser's cost model ranks first among all it considers:
    unswapped and swapped tiles, clusters, wave-filling splits) on the caller's own tensors, each as
    one CUDA graph of a few launches into a scratch output, and keeps the fastest: never slower, as
    timed, than choose_config.
    The answer is kept per shape bucket in memory and in a JSON file beside the compiled kernels
    (sm90_common.cache_dir()), so a later process does not time again.
Why
    choose_config is a cost model fitted to a sweep of other shapes; timing its best-ranked
    candidates on the problem itself corrects it where it is wrong, and cannot be over-fitted to
    anybody's shapes.
Bucket
    (GPU, SM count, A/B and D types, A and B major modes, L, N, K, M rounded up to a multiple of 16
    up to 1024 and to a power of two above, and the hash of the kernel's sources): a model layer
    fixes N and K, and M (the tokens in flight) moves; tiles are sized to M's rows below 1024, so the
    buckets are fine there. The first shape of a bucket decides for the bucket; any configuration is
    correct for any shape, so a bucket costs speed only.
Cost
    The first call of a bucket compiles every configuration not yet compiled on this machine (up to
    TUNE_CANDIDATES, each a few seconds, then cached on disk) and times each for a few milliseconds.
    Tuning runs
    eagerly: under CUDA-graph capture a bucket must already be tuned (RuntimeError otherwise).
The file
    {"version": 1, "entries": {bucket: {"tile_m", "tile_n", "cluster_mn", "split_k"[, "swap_ab"]}}}, written
    atomically. An entry the kernel does not implement, or a file that is not that shape, is ignored
    (with a warning) and the bucket is tuned again: nothing in it is run or imported. tuning_file reads
    it as untrusted input (no link followed, no FIFO waited on, its size and depth bounded).
Constraints: the plain epilogue (no bias, activation, residual, e4m3 out) and the cooperative
    schedule; bf16, fp16, tf32 and e4m3 inputs as compile_gemm accepts them.
"""

from __future__ import annotations

import functools
import math
import warnings
from pathlib import Path
from typing import Callable

from . import tuning_file
from .config import CLUSTERS, MAX_SPLIT_K, TILE_MS, TILE_WIDTHS, GemmConfig, ranked
from .jit import KERNEL_SOURCES
from .sm90_common import cache_dir, sources_hash

CACHE_VERSION = 1
CACHE_FILE = "hopper_gemm_tuning.json"
TUNE_CANDIDATES = 8    # configurations timed per bucket: the cost model's best-ranked
GRAPH_TARGET_MS = 2.0    # one candidate's graph runs about this long ...
MAX_LAUNCHES = 40        # ... with at most this many launches
ROTATED_BYTES = 150 * 2 ** 20   # the input sets tuning cycles through span this (3x the H200's L2): cold L2
MAX_INPUT_SETS = 32
REPLAYS = 3

_TUNED: dict[str, GemmConfig] = {}


def sweep(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16,
          allow_swap: bool = True) -> list[GemmConfig]:
    """The configurations tuning times: the TUNE_CANDIDATES that the chooser's cost model ranks first of
    every candidate it considers (config.ranked: unswapped and, with allow_swap, swapped tiles, clusters
    and wave-filling splits); the first is choose_config's own pick, so tuning never does worse."""
    return ranked(m, n, k, batch, sms, ab_bits, allow_swap=allow_swap, count=TUNE_CANDIDATES)


def bucket_key(gpu: str, sms: int, ab: str, d: str, a_major: str, b_major: str, batch: int, m: int, n: int,
               k: int) -> str:
    """The cache key of a problem: M rounded up to a multiple of 16 up to 1024 and to a power of two
    above, everything else exact."""
    m = max(1, m)
    m_bucket = -(-m // 16) * 16 if m <= 1024 else 1 << math.ceil(math.log2(m))
    return f"{gpu}|{sms}|{ab}|{d}|{a_major}{b_major}|L{batch}|M{m_bucket}|N{n}|K{k}"


def entry_config(entry) -> GemmConfig | None:
    """The configuration a cache entry names, or None where it is not one the kernel implements."""
    keys = {"tile_m", "tile_n", "cluster_mn", "split_k"}
    if not isinstance(entry, dict) or set(entry) not in (keys, keys | {"swap_ab"}):
        return None
    tile_m, tile_n, cluster, split = entry["tile_m"], entry["tile_n"], entry["cluster_mn"], entry["split_k"]
    swap = entry.get("swap_ab", False)
    if not (isinstance(cluster, list) and len(cluster) == 2 and all(type(v) is int for v in cluster)):
        return None
    if type(tile_m) is not int or type(tile_n) is not int or type(split) is not int or type(swap) is not bool:
        return None
    if tile_m not in TILE_MS or tile_n not in TILE_WIDTHS or tuple(cluster) not in CLUSTERS or not 1 <= split <= MAX_SPLIT_K:
        return None
    return GemmConfig(tile_m, tile_n, tuple(cluster), split, swap_ab=swap)


@functools.cache
def _kernel_hash() -> str:
    """The kernel's sources hashed once per process (a tuned bucket's key holds it)."""
    return sources_hash(KERNEL_SOURCES)


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def read_cache(path: Path) -> dict[str, GemmConfig]:
    """The usable entries of the tuning file (none if it is missing); a malformed file, or all the
    malformed entries together, is one warning (tuning_file: read as untrusted input)."""
    return tuning_file.read(path, CACHE_VERSION, entry_config)


def write_cache(path: Path, key: str, config: GemmConfig) -> None:
    """Add one entry to the tuning file (read again first, written atomically); a cache that cannot
    be written costs a tuning next time, nothing else."""
    entries = {k: _entry(c) for k, c in read_cache(path).items()}
    entries[key] = _entry(config)
    tuning_file.write(path, CACHE_VERSION, entries)


def _entry(config: GemmConfig) -> dict:
    return {"tile_m": config.tile_m, "tile_n": config.tile_n, "cluster_mn": list(config.cluster_mn),
            "split_k": config.split_k, "swap_ab": config.swap_ab}


def _graph_ms(runs: list[Callable[[], None]]) -> float:
    """Milliseconds per launch of the launches `runs` (one per input set) cycled in one CUDA graph on a
    side stream."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for run in runs:
            run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        runs[0]()
        end.record()
        torch.cuda.synchronize()
        launches = max(len(runs), min(MAX_LAUNCHES, int(GRAPH_TARGET_MS / max(start.elapsed_time(end), 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(launches):
                runs[i % len(runs)]()
    graph.replay()
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (REPLAYS * launches)


def time_runs(runs: dict[GemmConfig, list[Callable[[], None]]]) -> dict[GemmConfig, float]:
    """{configuration: ms per launch} of each configuration's launches (one per input set, cycled in one
    CUDA graph; hopper_gemm.time_sweep builds them)."""
    return {config: _graph_ms(launches) for config, launches in runs.items()}


def tuned_config(a, b, out_dtype, a_major: str, b_major: str,
                 time_candidates: Callable[[], dict[GemmConfig, float]],
                 usable: Callable[[GemmConfig], bool] | None = None) -> GemmConfig:
    """The configuration tuning chose for this problem's bucket: from memory, the tuning file, or
    timed now by time_candidates() ({configuration: ms}, hopper_gemm.time_sweep on these tensors;
    then stored in both). An entry of the file that `usable` refuses (one this problem cannot run:
    the file is untrusted, and a well-formed entry may still be one can_implement refuses here) is
    a warning, and the bucket is tuned again."""
    import torch

    m, k = a.shape[-2:]
    n = b.shape[-2]
    batch = a.shape[0] if a.dim() == 3 else 1
    props = torch.cuda.get_device_properties(a.device)
    key = bucket_key(props.name, props.multi_processor_count, str(a.dtype), str(out_dtype), a_major, b_major,
                     batch, m, n, k) + f"|{_kernel_hash()}"   # a changed kernel is tuned again
    if key in _TUNED:
        return _TUNED[key]
    path = cache_path()
    config = read_cache(path).get(key)
    if config is not None and usable is not None and not usable(config):
        warnings.warn(f"{path}: entries[{key[:200]!r}]: {config} cannot run this problem; tuning again", stacklevel=2)
        config = None
    if config is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"tune=True: bucket {key} is not tuned yet and tuning cannot run under CUDA-graph "
                               f"capture; call once before capturing")
        times = time_candidates()
        config = min(times, key=times.__getitem__)
        write_cache(path, key, config)
    _TUNED[key] = config
    return config
