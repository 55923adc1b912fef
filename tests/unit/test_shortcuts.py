"""The fast path's shortcuts on a registry shared by several functions: their hits reach the shared
statistics, and a function that goes lets go of its shortcuts (and the constant arrays they hold)."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import cupygraph as cg
from cupygraph.cache import CUDAGraphRegistry


def scaled(x, w):
    return x * w


def test_functions_on_one_registry_count_their_hits_and_free_their_constants_when_they_go():
    registry = CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", capture_sizes=[4]))
    weights, made = [], []
    for k in range(3):
        w = np.full(3, float(k + 1))
        f = cg.GraphedFunction(scaled, registry=registry, namespace=f"f{k}", constant_argnums=(1,))
        for seed in range(4):  # a capture, then three hits on the fast path
            x = np.random.default_rng(seed).standard_normal((4, 3))
            np.testing.assert_array_equal(f(x, w), x * w)
        weights.append(weakref.ref(w))
        made.append(weakref.ref(f))
        del f, w
    gc.collect()
    assert all(ref() is None for ref in made)  # nothing held the functions
    stats = registry.stats()
    assert stats.hits == 9 and stats.misses == 3, stats.to_dict()  # a dropped function's hits counted
    registry.clear()
    gc.collect()
    assert all(ref() is None for ref in weights)  # their shortcuts held the weights: gone with them
