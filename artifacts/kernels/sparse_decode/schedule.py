"""The persistent schedule of the sparse-decode kernels: which CTA (cluster) walks which (sequence, tile) range.

Pure Python (no torch, no CUTLASS), shared by the sm_90a and sm_100a kernels and the CPU tests.

Every sequence has the same number of 64-token tiles (topk / 64). The work is laid out as one list:
sequence 0's tiles, then sequence 1's, and so on; each sequence costs its tiles plus OVERHEAD_TILES
(what a switch to the next sequence costs a part: the query load and the epilogue), and the list is cut
into `parts` pieces of about equal cost, one per persistent CTA (or 2-CTA cluster). A sequence whose
tiles all land in one part is finished there (bf16 O and lse written by the main kernel); a sequence
cut between parts leaves one fp32 partial per part (a "split"), merged by the combine kernel. This is
the sizing FlashMLA's scheduler (`get_decoding_sched_meta`) uses, computed here on the host once per
shape (the work of a V3.2 sequence does not depend on its indices, so the schedule does not either:
a CUDA graph captured once replays it for any inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

OVERHEAD_TILES = 5          # the cost of a sequence switch, in tiles (FlashMLA 9241ae3 uses 5 on sm_90a)
FIELDS = 5                  # int32 words per part in the device table


@dataclass(frozen=True)
class Part:
    """One persistent CTA's walk: sequences first..last, tiles [first_tile, ...) of `first` and
    [..., end_tile) of `last` (whole sequences between); `first_split`: how many earlier parts hold
    splits of `first`."""
    first: int
    first_tile: int
    last: int
    end_tile: int
    first_split: int

    def words(self) -> list[int]:
        return [self.first, self.first_tile, self.last, self.end_tile, self.first_split]


@dataclass(frozen=True)
class Schedule:
    parts: tuple[Part, ...]          # one per persistent CTA (cluster); an empty part has first == batch
    split_base: tuple[int, ...]      # batch + 1 cumulative split counts: sequence b's partials are slots
    #                                  split_base[b] .. split_base[b + 1] - 1 (a one-split sequence has none used)
    tiles: int                       # tiles per sequence

    @property
    def slots(self) -> int:
        """Partial buffers the main kernel may write (at least one, so that the buffer is never empty)."""
        return max(1, self.split_base[-1])

    def splits(self, b: int) -> int:
        return self.split_base[b + 1] - self.split_base[b]

    def table(self) -> list[int]:
        """The parts as a flat int32 list (parts x FIELDS) for the device."""
        return [w for p in self.parts for w in p.words()]


def parts_for(sms: int, head_blocks: int) -> int:
    """Persistent walks: one CTA per head block in each, so that the walks fill every SM once."""
    if sms < 1 or head_blocks < 1:
        raise ValueError(f"sms={sms}, head_blocks={head_blocks}: both must be positive")
    return max(1, sms // head_blocks)


def plan(batch: int, topk: int, parts: int, tile: int = 64, overhead: int = OVERHEAD_TILES) -> Schedule:
    """Cut batch x (topk / tile) tiles into `parts` walks of about equal cost (see the module docstring)."""
    if batch < 1 or parts < 1 or topk < tile or topk % tile:
        raise ValueError(f"batch={batch}, topk={topk}, parts={parts}: need batch, parts >= 1 and topk a "
                         f"positive multiple of {tile}")
    tiles = topk // tile
    payload = math.ceil(batch * (tiles + overhead) / parts) + overhead
    out: list[Part] = []
    split_base = [0]
    b, done, n_split = 0, 0, 0          # the walk's position: sequence b, its tiles already given, its splits so far
    for _ in range(parts):
        if b >= batch:
            out.append(Part(batch, 0, batch, 0, 0))
            continue
        first, first_tile, first_split = b, done, n_split
        budget = payload
        while b < batch:
            remaining = tiles - done
            if budget >= remaining + overhead:          # the rest of sequence b fits: finish it here
                split_base.append(split_base[-1] + n_split + 1)
                budget -= remaining + overhead
                b, done, n_split = b + 1, 0, 0
            else:                                       # cut it: take what the budget allows, if anything
                if budget - overhead > 0:
                    done += budget - overhead
                    n_split += 1
                break
        if done > 0:
            out.append(Part(first, first_tile, b, done, first_split))
        else:
            out.append(Part(first, first_tile, b - 1, tiles, first_split))
    if b != batch:
        raise AssertionError(f"schedule left sequences {b}..{batch - 1} unassigned (payload {payload})")
    # a sequence finished in one part counts one split (its slot unused: it writes O itself)
    return Schedule(tuple(out), tuple(split_base), tiles)


def segments(schedule: Schedule, batch: int) -> list[tuple[int, int, int, int, int]]:
    """Every (part, sequence, tile begin, tile end, split index) the kernels will run, in walk order
    (what the device computes from the table; the CPU tests check it covers each tile once)."""
    out = []
    for p, part in enumerate(schedule.parts):
        if part.first >= batch:
            continue
        for b in range(part.first, part.last + 1):
            begin = part.first_tile if b == part.first else 0
            end = part.end_tile if b == part.last else schedule.tiles
            split = part.first_split if b == part.first else 0
            out.append((p, b, begin, end, split))
    return out
