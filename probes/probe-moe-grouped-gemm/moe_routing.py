"""Routing and permutation for an MoE layer, in NumPy (the probe moves the index arrays to the GPU).

A router gives each token `top_k` distinct experts and weights. The grouped GEMM wants each
expert's rows together, so the tokens are permuted (gathered) into one of two layouts and the
results un-permuted (gathered back and summed with the routing weights):

  contiguous  all experts' rows in one (M_total, K) buffer, expert by expert, each segment padded
              to a multiple of `align` rows (the GEMM's M tile): `m_indices` names each row's
              expert, -1 for padding. M_total depends on the routing, so the buffer's shape does.
  masked      one (E, capacity, K) buffer, expert e's rows at [e, 0:count_e]; `counts` (on the
              device) tells the GEMM how many rows are real. The shape is fixed by the capacity,
              which is what a CUDA graph captured once needs when the host does not know the counts.

Every plan records, for each (token, slot) pair, the row of the permuted buffer holding its
expert's output (`positions`), and for every buffer row the token it came from (`source`, -1 for
padding). The routing draw is Zipf-like (expert popularity ~ 1/rank^exponent over a seeded
shuffle of the experts) so some experts get many tokens and many get few or none.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Routing(NamedTuple):
    experts: np.ndarray   # (T, top_k) int64, distinct per row
    weights: np.ndarray   # (T, top_k) float32, each row sums to 1
    num_experts: int


class Plan(NamedTuple):
    layout: str
    counts: np.ndarray      # (E,) rows routed to each expert
    positions: np.ndarray   # (T, top_k) row of the permuted buffer (flattened (E * capacity) for masked)
    source: np.ndarray      # (rows of the buffer,) token of each row, -1 for padding
    m_indices: np.ndarray | None = None   # contiguous: (M_total,) expert of each row, -1 for padding
    capacity: int | None = None           # masked: rows per expert in the buffer


def zipf_routing(tokens: int, num_experts: int, top_k: int, seed: int, exponent: float = 1.0) -> Routing:
    """Each token's top_k distinct experts, drawn without replacement with probability ~ 1/rank^exponent
    (Gumbel top-k), and softmax weights over random logits of the chosen ones."""
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k={top_k} must be in 1..{num_experts}")
    rng = np.random.default_rng(seed)
    rank = rng.permutation(num_experts) + 1
    log_p = -exponent * np.log(rank.astype(np.float64))
    keys = log_p[None, :] + rng.gumbel(size=(tokens, num_experts))
    experts = np.argsort(-keys, axis=1, kind="stable")[:, :top_k].astype(np.int64)
    logits = rng.standard_normal((tokens, top_k))
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights = (weights / weights.sum(axis=1, keepdims=True)).astype(np.float32)
    return Routing(experts, weights, num_experts)


def _ranks(routing: Routing) -> tuple[np.ndarray, np.ndarray]:
    """(counts per expert, rank of each (token, slot) among its expert's rows, in token order)."""
    flat = routing.experts.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=routing.num_experts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    ranks = np.empty_like(flat)
    ranks[order] = np.arange(flat.size) - starts[flat[order]]
    return counts, ranks


def contiguous_plan(routing: Routing, align: int) -> Plan:
    """Experts' rows one after another, each segment padded to a multiple of `align` rows."""
    counts, ranks = _ranks(routing)
    padded = -(-counts // align) * align
    offsets = np.concatenate([[0], np.cumsum(padded)])
    flat = routing.experts.reshape(-1)
    positions = offsets[flat] + ranks
    total = int(offsets[-1])
    source = np.full(total, -1, dtype=np.int64)
    source[positions] = np.arange(flat.size) // routing.experts.shape[1]
    m_indices = np.repeat(np.arange(routing.num_experts), padded)
    m_indices[source < 0] = -1
    return Plan("contiguous", counts, positions.reshape(routing.experts.shape), source, m_indices=m_indices)


def masked_plan(routing: Routing, align: int) -> Plan:
    """One block of `capacity` rows per expert (the largest count rounded up to `align`)."""
    counts, ranks = _ranks(routing)
    capacity = max(align, int(-(-counts.max() // align) * align))
    flat = routing.experts.reshape(-1)
    positions = flat * capacity + ranks
    source = np.full(routing.num_experts * capacity, -1, dtype=np.int64)
    source[positions] = np.arange(flat.size) // routing.experts.shape[1]
    return Plan("masked", counts, positions.reshape(routing.experts.shape), source, capacity=capacity)


def off_by_one(plan: Plan, expert: int) -> Plan:
    """The negative control's bug: expert `expert`'s rows gathered one row late (row r holds the
    token meant for row r + 1, the last row the first's), the un-permute left as it was."""
    start = plan.capacity * expert if plan.layout == "masked" else int(np.flatnonzero(plan.m_indices == expert)[0])
    count = int(plan.counts[expert])
    if count < 2:
        raise ValueError(f"expert {expert} has {count} rows: nothing to shift")
    source = plan.source.copy()
    source[start:start + count] = np.roll(plan.source[start:start + count], -1)
    return plan._replace(source=source)


def median_expert(plan: Plan) -> int:
    """The expert whose row count is the median of those with at least two rows (the control's target)."""
    candidates = np.flatnonzero(plan.counts >= 2)
    order = candidates[np.argsort(plan.counts[candidates], kind="stable")]
    return int(order[len(order) // 2])


def permute(x: np.ndarray, plan: Plan) -> np.ndarray:
    """The permuted buffer for token rows x (T, K): padding rows zero."""
    out = np.zeros((plan.source.size, x.shape[1]), dtype=x.dtype)
    real = plan.source >= 0
    out[real] = x[plan.source[real]]
    return out


def unpermute(rows: np.ndarray, plan: Plan, routing: Routing) -> np.ndarray:
    """y[t] = sum_j weights[t, j] * rows[positions[t, j]] for the GEMM's output rows (buffer rows, N)."""
    return np.einsum("tj,tjn->tn", routing.weights, rows[plan.positions])
