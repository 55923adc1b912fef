"""``MockCUDAGraph``: PyTorch's ``CUDAGraph`` interface as a test double, for code without a GPU.

It records nothing and replays nothing (real capture and replay live in the backends); it checks
that the capture/replay protocol is followed and counts it, so code written against that
interface can be exercised in CPU tests. Its name says it is a mock, so nothing mistakes it for
a graph.
"""

from __future__ import annotations


class MockCUDAGraph:
    """Stand-in with ``capture_begin`` / ``capture_end`` / ``replay``; raises on protocol misuse."""

    def __init__(self) -> None:
        self.capturing = False
        self.captured = False
        self.captures = 0
        self.replays = 0

    def capture_begin(self) -> None:
        if self.capturing:
            raise RuntimeError("capture_begin() called twice: the capture is already open")
        self.capturing = True

    def capture_end(self) -> None:
        if not self.capturing:
            raise RuntimeError("capture_end() without capture_begin()")
        self.capturing = False
        self.captured = True
        self.captures += 1

    def replay(self) -> None:
        if self.capturing:
            raise RuntimeError("replay() while the capture is still open: call capture_end() first")
        if not self.captured:
            raise RuntimeError("replay() before any capture")
        self.replays += 1

    def launch(self) -> None:
        """Alias of ``replay`` (CuPy's name), so a dispatcher can drive either."""
        self.replay()
