"""A measured configuration choice for our Hopper GEMM: `gemm(a, b, tune=True)`.

What it does
    For a problem it has not seen, it times every configuration of `sweep` (tile_m x tile_n x
    cluster, and split-K where the output tiles fill under half of the SMs) on the caller's own
    tensors, each as one CUDA graph of a few launches into a scratch output, and keeps the fastest.
    The answer is kept per shape bucket in memory and in a JSON file beside the compiled kernels
    (sm90_common.cache_dir()), so a later process does not time again.
Why
    choose_config is a rule of thumb; on LLM shapes it was never fitted to (probe-hopper-gemm's
    held-out set) it left much more against cuBLAS than the best configuration the kernel has.
    Timing the candidates on the problem itself cannot be over-fitted to anybody's shapes.
Bucket
    (GPU, SM count, A/B and D types, A and B major modes, L, N, K, M rounded up to a power of two, and
    the hash of the kernel's sources):
    a model layer fixes N and K, and M (the tokens in flight) moves. The first shape of a bucket
    decides for the bucket; any configuration is correct for any shape, so a bucket costs speed only.
Cost
    The first call of a bucket compiles every configuration not yet compiled on this machine (up to
    ~40, each a few seconds, then cached on disk) and times each for a few milliseconds. Tuning runs
    eagerly: under CUDA-graph capture a bucket must already be tuned (RuntimeError otherwise).
The file
    {"version": 1, "entries": {bucket: {"tile_m", "tile_n", "cluster_mn", "split_k"}}}, written
    atomically. An entry the kernel does not implement, or a file that is not that shape, is ignored
    (with a warning) and the bucket is tuned again: nothing in it is run or imported. tuning_file reads
    it as untrusted input (no link followed, no FIFO waited on, its size and depth bounded).
Constraints: the plain epilogue (no bias, activation, residual, e4m3 out) and the cooperative
    schedule; bf16, fp16, tf32 and e4m3 inputs as compile_gemm accepts them.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

from . import tuning_file
from .hopper_gemm import (CLUSTERS, K_TILE_BYTES, KERNEL_SOURCES, MAX_SPLIT_K, TILE_MS, TILE_NS, GemmConfig,
                          choose_config, compile_gemm)
from .sm90_common import cache_dir, sources_hash

CACHE_VERSION = 1
CACHE_FILE = "hopper_gemm_tuning.json"
SWEEP_CLUSTERS = ((1, 1), (2, 1))
SWEEP_SPLITS = (2, 4, 8)
GRAPH_TARGET_MS = 2.0    # one candidate's graph runs about this long ...
MAX_LAUNCHES = 20        # ... with at most this many launches
REPLAYS = 3

_TUNED: dict[str, GemmConfig] = {}


def sweep(m: int, n: int, k: int, batch: int = 1, sms: int = 132, ab_bits: int = 16) -> list[GemmConfig]:
    """Every configuration tuning times: tile_m x tile_n x cluster (2x1 only with two row tiles),
    and split-K 2/4/8 with a 1x1 cluster where the output tiles fill under half of the SMs (and each
    K range keeps at least one K tile)."""
    out = []
    k_tiles = math.ceil(k * ab_bits / 8 / K_TILE_BYTES)
    for tile_m in TILE_MS:
        for tile_n in TILE_NS:
            tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n) * batch
            for cluster in SWEEP_CLUSTERS:
                if cluster == (2, 1) and math.ceil(m / tile_m) < 2:
                    continue
                out.append(GemmConfig(tile_m, tile_n, cluster, 1))
            if 2 * tiles < sms:
                out += [GemmConfig(tile_m, tile_n, (1, 1), split) for split in SWEEP_SPLITS
                        if split <= min(MAX_SPLIT_K, k_tiles)]
    return out


def bucket_key(gpu: str, sms: int, ab: str, d: str, a_major: str, b_major: str, batch: int, m: int, n: int,
               k: int) -> str:
    """The cache key of a problem: M rounded up to a power of two, everything else exact."""
    m_bucket = 1 << max(0, math.ceil(math.log2(max(1, m))))
    return f"{gpu}|{sms}|{ab}|{d}|{a_major}{b_major}|L{batch}|M{m_bucket}|N{n}|K{k}"


def entry_config(entry) -> GemmConfig | None:
    """The configuration a cache entry names, or None where it is not one the kernel implements."""
    if not isinstance(entry, dict) or set(entry) != {"tile_m", "tile_n", "cluster_mn", "split_k"}:
        return None
    tile_m, tile_n, cluster, split = entry["tile_m"], entry["tile_n"], entry["cluster_mn"], entry["split_k"]
    if not (isinstance(cluster, list) and len(cluster) == 2 and all(type(v) is int for v in cluster)):
        return None
    if type(tile_m) is not int or type(tile_n) is not int or type(split) is not int:
        return None
    if tile_m not in TILE_MS or tile_n not in TILE_NS or tuple(cluster) not in CLUSTERS or not 1 <= split <= MAX_SPLIT_K:
        return None
    if split > 1 and tuple(cluster) != (1, 1):
        return None
    return GemmConfig(tile_m, tile_n, tuple(cluster), split)


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
            "split_k": config.split_k}


def _graph_ms(run) -> float:
    """Milliseconds per launch of run() replayed from one CUDA graph on a side stream."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        launches = max(1, min(MAX_LAUNCHES, int(GRAPH_TARGET_MS / max(start.elapsed_time(end), 1e-3))))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(launches):
                run()
    graph.replay()
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / (REPLAYS * launches)


def time_sweep(a, b, out_dtype=None, alpha: float = 1.0) -> dict[GemmConfig, float]:
    """{configuration: ms per launch} of every configuration of `sweep` that compile_gemm accepts for
    a @ b.T, each into its own scratch output (the caller's tensors are only read)."""
    import torch

    m, k = a.shape[-2:]
    n = b.shape[-2]
    batch = a.shape[0] if a.dim() == 3 else 1
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    bits = 8 if a.dtype == torch.float8_e4m3fn else 32 if a.dtype == torch.float32 else 16
    configs = [choose_config(m, n, k, batch, sms, bits)]
    configs += [c for c in sweep(m, n, k, batch, sms, bits) if c not in configs]
    times = {}
    for config in configs:
        try:
            run, _ = compile_gemm(a, b, out_dtype, alpha, tile_m=config.tile_m, tile_n=config.tile_n,
                                  cluster_mn=config.cluster_mn, split_k=config.split_k, swap_ab=False)
        except ValueError:   # a configuration this problem cannot use (a split wider than its K tiles)
            continue
        times[config] = _graph_ms(run)
    return times


def tuned_config(a, b, out_dtype, a_major: str, b_major: str, alpha: float = 1.0) -> GemmConfig:
    """The configuration tuning chose for this problem's bucket: from memory, the tuning file, or
    timed now (then stored in both)."""
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
    if config is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"tune=True: bucket {key} is not tuned yet and tuning cannot run under CUDA-graph "
                               f"capture; call once before capturing")
        times = time_sweep(a, b, out_dtype, alpha)
        config = min(times, key=times.__getitem__)
        write_cache(path, key, config)
    _TUNED[key] = config
    return config
