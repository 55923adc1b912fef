"""Simulate graph-cache eviction on a skewed trace: total time under LRU, LFU and benefit.

The policies are cupygraph's own (``cupygraph.cache.eviction``); the cache around them does what
``GraphStore`` does under a memory budget: a call of a held key replays its graph; any other call
captures it (warm-up, capture, instantiation: the key's capture cost), replays it once, and the
policy then evicts until the graphs fit the budget again, never the graph just added. Time is a
simulated clock: each call advances it by what the call costs plus a fixed gap between calls.

The trace: ``keys`` graphs (functions x batch sizes) with Zipf popularity that moves to other
keys ``phases - 1`` times (traffic changes: new prompts, a new model). Each key has its own eager
time, replay time (a fraction of eager), capture cost (a warm-up run plus recording and
instantiation, growing with the graph's node count) and bytes held (growing with its batch
size and buffers), drawn independently of popularity and of each other: a policy that only
counts uses (LFU) or recency (LRU) cannot tell a cheap small graph from an expensive large one.

    python tools/eviction_sim.py                 # the default trace, a table of the three policies
    python tools/eviction_sim.py --calls 50000 --keys 80 --budget 0.2 --seed 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cupygraph.cache.eviction import EvictionPolicy, HighestBenefit, eviction_policy


class Key(NamedTuple):
    eager_s: float
    replay_s: float
    capture_s: float
    nbytes: int


class Timing:
    """What ``KeyTiming`` gives the benefit policy: measured eager and replay times (the capture time
    is the entry's own, ``capture_time``)."""

    def __init__(self, key: Key):
        self.key = key

    def eager_s(self) -> Optional[float]:
        return self.key.eager_s

    def replay_s(self) -> Optional[float]:
        return self.key.replay_s


class Entry:
    """The fields of ``CUDAGraphEntry`` the policies read."""

    def __init__(self, index: int, key: Key, now: float):
        self.index, self.nbytes, self.capture_time, self.timing = index, key.nbytes, key.capture_s, Timing(key)
        self.captured_at = self.last_used = now
        self.replay_count = 1  # the capture's first replay
        self.total_replay_s = key.replay_s


class Clock:
    """The simulated time, read by the benefit policy as it would read ``time.time``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Result(NamedTuple):
    policy: str
    total_s: float
    captures: int
    hit_rate: float


def make_keys(rng: np.random.Generator, count: int) -> list[Key]:
    keys = []
    for _ in range(count):
        eager = float(rng.uniform(50e-6, 2e-3))  # host-bound eager pipelines: 50 us to 2 ms
        replay = eager * float(rng.uniform(0.1, 0.6))
        nbytes = int(rng.choice([1, 2, 4, 8, 16, 32, 64]) * 2**20)
        nodes = int(rng.integers(10, 2000))
        capture = eager + 1e-3 + nodes * 5e-6  # warm-up + recording and instantiation per node
        keys.append(Key(eager, replay, capture, nbytes))
    return keys


def make_trace(rng: np.random.Generator, keys: int, calls: int, skew: float, phases: int) -> np.ndarray:
    ranks = np.arange(1, keys + 1, dtype=np.float64)
    weights = ranks ** -skew
    parts = []
    for part in np.array_split(np.arange(calls), phases):
        order = rng.permutation(keys)  # popularity independent of cost and size, reshuffled per phase
        parts.append(order[rng.choice(keys, size=len(part), p=weights / weights.sum())])
    return np.concatenate(parts)


def simulate(policy: EvictionPolicy, keys: list[Key], trace: np.ndarray, budget: int, gap_s: float,
             clock: Clock) -> Result:
    """Run ``trace`` through a budgeted cache under ``policy``, advancing ``clock``."""
    held: dict[int, Entry] = {}
    total = 0.0
    captures = hits = 0
    for index in trace.tolist():
        key = keys[index]
        now = clock.now
        entry = held.get(index)
        if entry is not None:
            cost = key.replay_s
            entry.replay_count += 1
            entry.last_used = now
            entry.total_replay_s += key.replay_s
            hits += 1
        else:
            cost = key.capture_s + key.replay_s
            captures += 1
            entry = Entry(index, key, now)
            held[index] = entry
            while sum(e.nbytes for e in held.values()) > budget:
                victim = policy.victim(held.values(), exclude=entry)
                if victim is None:
                    break
                del held[victim.index]
        total += cost
        clock.now = now + cost + gap_s
    return Result(policy.name, total, captures, hits / len(trace))


def compare(calls: int = 20000, keys: int = 60, budget: float = 0.25, skew: float = 1.0, phases: int = 2,
            gap_s: float = 100e-6, seed: int = 0) -> list[Result]:
    """Total time of the same trace under the same budget (a fraction of all keys' bytes) per policy."""
    rng = np.random.default_rng(seed)
    table = make_keys(rng, keys)
    trace = make_trace(rng, keys, calls, skew, phases)
    limit = int(budget * sum(k.nbytes for k in table))
    results = []
    for name in ("lru", "lfu", "benefit"):
        clock = Clock()
        policy = HighestBenefit(per_byte=True, clock=clock) if name == "benefit" else eviction_policy(name)
        results.append(simulate(policy, table, trace, limit, gap_s, clock))
    return results


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=60)
    parser.add_argument("--budget", type=float, default=0.25, help="memory budget as a fraction of all graphs' bytes")
    parser.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of key popularity")
    parser.add_argument("--phases", type=int, default=2, help="times the popular keys change, plus one")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results = compare(args.calls, args.keys, args.budget, args.skew, args.phases, seed=args.seed)
    print(f"{'policy':<8} {'total ms':>10} {'captures':>9} {'hit rate':>9}")
    for r in results:
        print(f"{r.policy:<8} {r.total_s * 1e3:>10.1f} {r.captures:>9} {r.hit_rate:>9.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
