"""What the graph cache measures and marks, only when asked (layer 5, inside ``cache``).

``hooks``: the launch hooks a cache installs on its entries from the config (``time_replays``,
``replay_timing_every``, ``nvtx``); ``ranges``: NVTX range providers; ``timing``: the measured
eager, replay and capture times of one key, which the ``benefit`` eviction reads. Imported by the
rest of ``cache`` only; may import what ``cache`` may import.
"""
