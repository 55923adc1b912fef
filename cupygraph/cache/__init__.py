"""Layer 5, the one graph cache. This module is its front: every layer above imports the cache from here.

What a front door uses:

* ``CUDAGraphRegistry`` (``registry.py``): the cache of one graph family, ``GraphStore``
  (``store.py``: on a miss, one call ``find_or_capture(key, request)``) holding its graphs in
  ``HeldGraphs`` (``held.py``: lookups, eviction, memory, statistics), with the seed's batch-size
  API (``seed_inputs``, ``check_output_shapes``) on top;
* ``CaptureRequest``: what to record (``recording.py``); ``CUDAGraphEntry``: one graph and its
  static buffers, whose ``run`` is the replay hot path (``entry.py``, ``strategies.py``);
* typed keys (``key.py``); why a call runs eagerly and the one way to do it (``Eager``,
  ``run_eagerly``: ``failures.py``); ``CUDAGraphStats`` and each key's ``GraphCost`` (``stats.py``, ``histogram.py``);
* debug checks (``checks/``: writes into arguments, stale view outputs); launch hooks and
  measured times (``instruments/``).

May import foundation, config, dispatch, backends and control_flow/linalg/random; never compat,
diagnostics, api, testing or the CLI. Inside ``cache`` modules import each other, never this front.
"""

from .checks.freshness import check_arguments_fresh, check_fresh
from .checks.writes import same_bytes
from .entry import CUDAGraphEntry
from .failures import EMPTY_BATCH, MODE_NONE, RAISED, Eager, run_eagerly
from .first_call import FirstCall
from .histogram import SizeHistogram
from .instruments.hooks import key_label
from .key import (
    ArgPart,
    BatchedArg,
    ConstArg,
    GraphKey,
    Kwargs,
    Namespace,
    Signature,
    StaticArg,
    WholeArg,
    compared_exactly,
    keyable,
)
from .padding import check_pad_value
from .recording import CaptureRequest, recording_here
from .registry import CUDAGraphRegistry, RegisteredGraph, check_output_shapes, seed_inputs
from .stats import CUDAGraphStats, GraphCost
from .store import CaptureWatch, GraphStore

__all__ = [
    "EMPTY_BATCH",
    "MODE_NONE",
    "RAISED",
    "ArgPart",
    "BatchedArg",
    "CUDAGraphEntry",
    "CUDAGraphRegistry",
    "CUDAGraphStats",
    "CaptureRequest",
    "CaptureWatch",
    "ConstArg",
    "Eager",
    "FirstCall",
    "GraphCost",
    "GraphKey",
    "GraphStore",
    "Kwargs",
    "Namespace",
    "RegisteredGraph",
    "Signature",
    "SizeHistogram",
    "StaticArg",
    "WholeArg",
    "check_arguments_fresh",
    "check_fresh",
    "check_output_shapes",
    "check_pad_value",
    "compared_exactly",
    "key_label",
    "keyable",
    "recording_here",
    "run_eagerly",
    "same_bytes",
    "seed_inputs",
]
