"""Checks that keep a replay true to the eager call, inside the graph cache (layer 5).

``writes``: whether the function writes into its copied arguments, found at capture (warm-ups) or
on the first replay of an entry captured without warm-ups; ``freshness``: debug mode's stale view
outputs; ``overlaps``: arguments and constants whose overlap would hide a write from a replay.
Imported by the rest of ``cache`` only; may import what ``cache`` may import.
"""
