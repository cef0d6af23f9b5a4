"""Test inputs with the tails real activations have, from a seeded NumPy generator.

normal           standard normal
student-t        Student-t with 3 degrees of freedom (rare values tens of sigma out)
outlier-channels normal, with 8 of every 1024 K-channels (columns) scaled by 100: the outlier
                 features of LLM activations, where every row shares the same huge columns
"""

from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("normal", "student-t", "outlier-channels")
OUTLIER_CHANNELS_PER_1024, OUTLIER_GAIN = 8, 100.0


def sample(kind: str, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return rng.standard_normal(shape)
    if kind == "student-t":
        return rng.standard_t(3.0, shape)
    if kind == "outlier-channels":
        x = rng.standard_normal(shape)
        count = max(1, shape[1] * OUTLIER_CHANNELS_PER_1024 // 1024)
        x[:, rng.choice(shape[1], size=count, replace=False)] *= OUTLIER_GAIN
        return x
    raise ValueError(f"unknown distribution {kind!r}; use one of {DISTRIBUTIONS}")
