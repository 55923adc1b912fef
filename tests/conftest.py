"""Shared test setup: the ``gpu`` marker skips with the reason where no GPU is usable."""

from __future__ import annotations

import pytest

from cupygraph.backends import gpu_unavailable_reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
