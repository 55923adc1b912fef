"""The README's table of how many times a call runs the function ("What a call runs") is what the
host backend does, for every ``num_warmups`` it shows (the GPU column: ``tests/gpu/test_first_call_gpu.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from repo_files import documented_runs
from run_counts import measured_runs


@pytest.mark.parametrize("num_warmups", [0, 1, 2])
def test_the_documented_runs_per_call_are_the_host_backends(num_warmups):
    documented = {row: count(num_warmups) for row, count in documented_runs("host").items()}
    assert measured_runs(np, "host", num_warmups) == documented
