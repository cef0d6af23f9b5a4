"""GEMM shapes from real model layers, for the held-out set a kernel's configuration choice is
reported on (DESIGN section 4: "fitted on one set of shapes and reported on another").

A layer is a linear projection, out_features x in_features (N x K of D = A @ W^T); M is the number of
tokens in flight, from decode (1) to prefill chunks (8192), including sizes that are not multiples of
any tile. `held_out(seed, count, exclude)` draws shapes reproducibly from these layers with a seed the
record keeps, leaving out every shape of the tuning set.

The dimensions are those of each model's published configuration (hidden size, intermediate size,
attention heads x head dim, KV heads); they are inputs to a probe, not claims of the wiki.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

M_VALUES = (1, 2, 3, 4, 5, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768,
            1024, 1536, 2048, 3072, 4096, 6144, 8192)
"""Tokens in flight: every power of two from 1 to 8192 and the ragged sizes between them that batching
produces (3, 5, 12, 24, 40, 80, ...)."""


@dataclass(frozen=True)
class Layer:
    model: str
    name: str
    n: int
    """out_features."""
    k: int
    """in_features."""


def _attention(model: str, hidden: int, heads: int, kv_heads: int, head_dim: int) -> list[Layer]:
    q, kv = heads * head_dim, kv_heads * head_dim
    return [Layer(model, "qkv_proj", q + 2 * kv, hidden), Layer(model, "o_proj", hidden, q)]


def _mlp(model: str, hidden: int, intermediate: int) -> list[Layer]:
    return [Layer(model, "gate_up_proj", 2 * intermediate, hidden), Layer(model, "down_proj", hidden, intermediate)]


LAYERS: tuple[Layer, ...] = tuple(
    _attention("Llama-3-8B", 4096, 32, 8, 128) + _mlp("Llama-3-8B", 4096, 14336)
    + _attention("Llama-3-70B", 8192, 64, 8, 128) + _mlp("Llama-3-70B", 8192, 28672)
    + _attention("Llama-3.1-405B", 16384, 128, 8, 128) + _mlp("Llama-3.1-405B", 16384, 53248)
    + _attention("Qwen2.5-7B", 3584, 28, 4, 128) + _mlp("Qwen2.5-7B", 3584, 18944)
    + _attention("Qwen2.5-72B", 8192, 64, 8, 128) + _mlp("Qwen2.5-72B", 8192, 29568)
    + _attention("Qwen3-32B", 5120, 64, 8, 128) + _mlp("Qwen3-32B", 5120, 25600)
    + _attention("Mixtral-8x7B", 4096, 32, 8, 128) + [Layer("Mixtral-8x7B", "expert_w1", 14336, 4096),
                                                      Layer("Mixtral-8x7B", "expert_w2", 4096, 14336)]
    + _attention("Gemma-2-9B", 3584, 16, 8, 256) + _mlp("Gemma-2-9B", 3584, 14336)
    + _attention("Gemma-2-27B", 4608, 32, 16, 128) + _mlp("Gemma-2-27B", 4608, 36864)
    + [Layer("DeepSeek-V3", "q_a_proj", 1536, 7168), Layer("DeepSeek-V3", "q_b_proj", 128 * 192, 1536),
       Layer("DeepSeek-V3", "kv_a_proj", 576, 7168), Layer("DeepSeek-V3", "kv_b_proj", 128 * 256, 512),
       Layer("DeepSeek-V3", "o_proj", 7168, 128 * 128), Layer("DeepSeek-V3", "dense_gate_up", 2 * 18432, 7168),
       Layer("DeepSeek-V3", "dense_down", 7168, 18432), Layer("DeepSeek-V3", "expert_gate_up", 2 * 2048, 7168),
       Layer("DeepSeek-V3", "expert_down", 7168, 2048)]
)


def held_out(seed: int, count: int, exclude: set[tuple[int, int, int]] | frozenset = frozenset(),
             m_values: tuple[int, ...] = M_VALUES, layers: tuple[Layer, ...] = LAYERS,
             max_elements: int | None = None) -> list[dict]:
    """`count` distinct (m, n, k) shapes drawn with `seed` from `layers` x `m_values`, none in `exclude`
    (the tuning set), each as {"m", "n", "k", "model", "layer"}; at most `max_elements` elements in the
    largest operand if given (to bound memory and time). Raises ValueError when fewer remain."""
    if count < 0:
        raise ValueError(f"count={count}: give 0 or more shapes")
    pool = sorted({(m, layer.n, layer.k): layer for layer in layers for m in m_values}.items())
    pool = [(shape, layer) for shape, layer in pool if shape not in exclude
            and (max_elements is None or max(shape[0] * shape[2], shape[1] * shape[2], shape[0] * shape[1]) <= max_elements)]
    if count > len(pool):
        raise ValueError(f"count={count}: only {len(pool)} held-out shapes remain outside the tuning set")
    chosen = random.Random(seed).sample(pool, count)
    return [{"m": m, "n": n, "k": k, "model": layer.model, "layer": layer.name} for (m, n, k), layer in chosen]
