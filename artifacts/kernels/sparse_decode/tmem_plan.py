"""Where S, P and O live in tensor memory in the sm_100a sparse-decode kernel: one plan, checked.

TMEM has 128 lanes (one per row of the 128-row MMA tile = one query head) and 512 columns of 32 bits.
The kernel allocates a power of two of columns and places
    S  the Q.K^T scores of one tile, fp32: one column per selected token;
    P  the probabilities of the same tile in fp16, two per 32-bit column, written over S's first columns
       (S of a tile is dead once the softmax has read it; the P.V MMA reads P from there);
    O  the running output of this CTA's value half, fp32: one column per value dimension.
The only overlap allowed is P inside S. Pure Python, so that a CPU test can hold the plan to that.
"""

from __future__ import annotations

from dataclasses import dataclass

TMEM_COLUMNS = 512
ACC_BITS = 32


@dataclass(frozen=True)
class TmemPlan:
    block_t: int        # tokens per tile: S columns
    value_dims: int     # value dimensions per CTA: O columns
    p_bits: int = 16    # width of a P element
    s_offset: int = 0
    p_offset: int = 0   # in columns, relative to the allocation
    o_offset: int = 256

    @property
    def s_cols(self) -> tuple[int, int]:
        return self.s_offset, self.s_offset + self.block_t

    @property
    def p_cols(self) -> tuple[int, int]:
        return self.p_offset, self.p_offset + self.block_t * self.p_bits // ACC_BITS

    @property
    def o_cols(self) -> tuple[int, int]:
        return self.o_offset, self.o_offset + self.value_dims

    @property
    def alloc_cols(self) -> int:
        """Columns to allocate: the smallest power of two (at least 32) covering every buffer."""
        end = max(self.s_cols[1], self.p_cols[1], self.o_cols[1])
        cols = 32
        while cols < end:
            cols *= 2
        return cols

    def problems(self) -> list[str]:
        """What is wrong with the plan; empty when it is sound."""
        out = []
        if self.alloc_cols > TMEM_COLUMNS:
            out.append(f"needs {self.alloc_cols} columns; TMEM has {TMEM_COLUMNS}")
        (s0, s1), (p0, p1), (o0, o1) = self.s_cols, self.p_cols, self.o_cols
        if not (s0 <= p0 and p1 <= s1):
            out.append(f"P columns [{p0}, {p1}) are not inside S columns [{s0}, {s1}) (P must alias S)")
        for name, (a0, a1) in (("S", (s0, s1)), ("P", (p0, p1))):
            if a0 < o1 and o0 < a1:
                out.append(f"{name} columns [{a0}, {a1}) overlap O columns [{o0}, {o1})")
        if o0 % 32 or s0 % 32:
            out.append("S and O must start on a multiple of 32 columns")
        return out
