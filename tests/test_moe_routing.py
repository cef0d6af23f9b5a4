"""probe-moe-grouped-gemm's routing and permutation (NumPy, no GPU): the Zipf draw is reproducible and
valid, both layouts round-trip every token through permute -> per-expert GEMM -> un-permute, and the
negative control's off-by-one permutation lands between the bf16 gate and ten times it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_probe_script

from kernelwiki.harness import gates

routing_mod = load_probe_script("probe-moe-grouped-gemm", "moe_routing")


def _pipeline(x, w, plan, routing):
    """permute -> each buffer row times its expert's W^T -> un-permute, in float64."""
    rows = routing_mod.permute(x, plan)
    expert_of_row = (plan.m_indices if plan.layout == "contiguous"
                     else np.repeat(np.arange(routing.num_experts), plan.capacity))
    out = np.zeros((rows.shape[0], w.shape[1]))
    for e in range(routing.num_experts):
        hit = expert_of_row == e
        out[hit] = rows[hit] @ w[e].T
    return routing_mod.unpermute(out, plan, routing)


def _reference(x, w, routing):
    """y[t] = sum_j weights[t, j] * W[e(t, j)] x[t], token by token."""
    per_slot = np.einsum("tk,tjnk->tjn", x, w[routing.experts])
    return np.einsum("tj,tjn->tn", routing.weights, per_slot)


def test_routing_is_reproducible_distinct_and_normalized():
    a = routing_mod.zipf_routing(300, 32, 4, seed=5, exponent=0.5)
    b = routing_mod.zipf_routing(300, 32, 4, seed=5, exponent=0.5)
    assert np.array_equal(a.experts, b.experts) and np.array_equal(a.weights, b.weights)
    assert not np.array_equal(a.experts, routing_mod.zipf_routing(300, 32, 4, seed=6, exponent=0.5).experts)
    assert all(len(set(row)) == 4 for row in a.experts.tolist())
    np.testing.assert_allclose(a.weights.sum(axis=1), 1.0, rtol=1e-6)
    counts = np.bincount(a.experts.ravel(), minlength=32)
    assert counts.max() > 2 * counts.min()   # uneven, as the draw means to be
    with pytest.raises(ValueError):
        routing_mod.zipf_routing(10, 4, 5, seed=0)


@pytest.mark.parametrize("layout, align", [("contiguous", 128), ("contiguous", 1), ("masked", 64)])
def test_permute_gemm_unpermute_matches_the_reference(layout, align):
    rng = np.random.default_rng(1)
    routing = routing_mod.zipf_routing(200, 16, 4, seed=2, exponent=0.7)
    plan = (routing_mod.contiguous_plan(routing, align) if layout == "contiguous"
            else routing_mod.masked_plan(routing, align))
    x, w = rng.standard_normal((200, 24)), rng.standard_normal((16, 8, 24))
    np.testing.assert_allclose(_pipeline(x, w, plan, routing), _reference(x, w, routing), rtol=1e-10, atol=1e-10)
    assert (plan.source >= 0).sum() == routing.experts.size
    if layout == "contiguous":
        segments = np.bincount(np.repeat(np.arange(16), -(-plan.counts // align) * align), minlength=16)
        assert (segments % align == 0).all() and plan.source.size == segments.sum()
        real = plan.source >= 0
        assert (plan.m_indices[~real] == -1).all() and (plan.m_indices[real] >= 0).all()
    else:
        assert plan.capacity % align == 0 and plan.capacity >= plan.counts.max()


def test_the_off_by_one_control_fails_the_bf16_gate_by_less_than_ten_times():
    rng = np.random.default_rng(3)
    routing = routing_mod.zipf_routing(512, 128, 8, seed=4, exponent=0.5)
    plan = routing_mod.contiguous_plan(routing, 128)
    expert = routing_mod.median_expert(plan)
    broken = routing_mod.off_by_one(plan, expert)
    assert (broken.source != plan.source).sum() == plan.counts[expert]
    x, w = rng.standard_normal((512, 64)), rng.standard_normal((128, 32, 64))
    result = gates.check(_pipeline(x, w, broken, routing), _reference(x, w, routing), "bf16")
    tolerance = gates.tolerance("bf16")
    assert not result["passed"]
    assert tolerance < result["rel_err"] < 10 * tolerance
    assert gates.check(_pipeline(x, w, plan, routing), _reference(x, w, routing), "bf16")["passed"]
