"""What the communication probe measures and how it is counted, without a GPU: the nccl-tests
bandwidth rules, the element counts of each message, and which input every rank contributes.

nccl-tests reports, for a message of S bytes timed at t seconds per operation (the slowest rank's
average over the timed loop), the algorithm bandwidth algbw = S / t and the bus bandwidth
busbw = algbw x factor(n), the factor that makes busbw comparable with the link speed whatever the
rank count: 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all. S is
the size of the whole buffer: the per-rank buffer for all-reduce and all-to-all, the gathered
output for all-gather, the scattered input for reduce-scatter. A copy between two GPUs counts
bytes moved / t.
"""

from __future__ import annotations

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p_copy", "one_shot_all_reduce")
ELEMENT_BYTES = {"fp32": 4, "bf16": 2}
ALIGN_ELEMENTS = 8
"""Every rank's chunk is a multiple of 8 elements: 16-byte vector loads (symmetric memory's
one-shot kernel requires them) and equal chunks for the collectives that split the buffer."""


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw for `op` on `ranks` GPUs (nccl-tests' PERFORMANCE.md rules)."""
    if ranks < 2:
        raise ValueError(f"{op} needs 2 or more ranks, not {ranks}")
    if op in ("all_reduce", "one_shot_all_reduce"):
        return 2 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if op == "p2p_copy":
        return 1.0
    raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")


def elements(op: str, nbytes: int, dtype: str, ranks: int) -> int:
    """Elements of the whole buffer S for a message of about `nbytes`, rounded down so that each
    rank's chunk (S / ranks) is a whole number of aligned elements; at least one chunk each."""
    per = ELEMENT_BYTES[dtype]
    unit = ranks * ALIGN_ELEMENTS
    return max(unit, (nbytes // per) // unit * unit)


def bandwidths(op: str, buffer_bytes: int, seconds: float, ranks: int) -> dict:
    """algbw and busbw in GB/s (10^9 bytes per second, as nccl-tests prints them)."""
    algbw = buffer_bytes / seconds / 1e9
    return {"algbw_gb_s": algbw, "busbw_gb_s": algbw * bus_factor(op, ranks)}


def input_seed(seed: int, rank: int, salt: int) -> int:
    """The seed of rank `rank`'s input: every rank can regenerate every other rank's input, so each
    checks its own output against a reference without gathering all inputs first."""
    return seed * 1009 + rank * 7919 + salt


def iterations(nbytes: int) -> tuple[int, int]:
    """(warmup, timed) operations: many for small messages (microseconds each), fewer for large."""
    if nbytes <= 1 << 20:
        return 20, 200
    if nbytes <= 64 << 20:
        return 5, 50
    return 3, 20
