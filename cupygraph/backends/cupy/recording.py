"""The one executable type of the GPU backend: a recording's graphs, every executable made of them, and launch.

A recording is one CUDA graph (FULL) or graph pieces with eager steps between them (PIECEWISE), as
captured by CuPy (``end_capture`` instantiates each piece once). ``CupyRecording`` owns everything
made of those graphs from then on:

* PDL's re-instantiation (``replace``): a piece's graph with programmatic edges, instantiated again,
  takes the place of CuPy's executable;
* banks (``add_bank``): further instantiations of every piece, so re-pointing nodes for a new call
  never edits an executable still running. Measured on an H100 (2026-11-26): setting a node of an
  executable whose last launch has not finished waits for it; a caller that keeps each result until
  the next call makes the output's address alternate, and re-pointed a busy executable every call
  (52 µs of host time per call, against 6 µs with a second executable taking the other address);
* launch: the active bank's executables on the caller's current stream.

Which addresses each bank's nodes hold (``Bank.current``) is the binder's to decide
(``zerocopy/binder.py``); node handles belong to the graph, so one re-pointed node serves every bank.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Optional

import cupy

from ...errors import CupyGraphError
from ...logs import logger
from ..base import Recording
from ..driver import bindings, ok
from ..driver.reading import RecordingGraphs
from ..driver.topology import conditional_nodes, with_conditional_legend
from ..fastpath.compiled import FamilyState

_runtime = cupy.cuda.runtime
_current_stream = cupy.cuda.get_current_stream


def is_piece(step: Any) -> bool:
    """Whether a recording step is a captured graph (else an eager step between pieces)."""
    return hasattr(step, "graphExec")


def _launch_handle(handle: int) -> None:
    _runtime.graphLaunch(handle, _current_stream().ptr)


def _run_all(launches: tuple[Callable[[], None], ...]) -> None:
    for launch in launches:
        launch()


class Bank:
    """One executable per graph piece, the addresses its nodes hold, and how to launch it."""

    __slots__ = ("current", "fresh", "handles", "index", "launch", "nbytes")

    def __init__(self, index: int, handles: tuple[int, ...], launch: Callable[[], None], current: list[int]):
        self.index = index
        """Its place among the recording's banks (what ``ReplayCounts.last_bank`` names)."""
        self.handles = handles
        """This bank's executable of each graph piece, in order."""
        self.launch = launch
        """Launches this bank's executables (and the eager steps between them) on the current stream."""
        self.current = current
        """Per binder slot, the address this bank's nodes hold."""
        self.fresh = True
        """Never launched: updating it cannot wait for a launch."""
        self.nbytes = 0
        """Device memory its instantiation and upload took (``add_bank``'s banks; the first bank's is the
        capture's, in the key's ``GraphCost``)."""


class CupyRecording(Recording):
    """One graph (FULL) or a sequence of graph pieces and eager steps (PIECEWISE), with their executables.

    Holds, for as long as it lives, the library state its kernels use (``held``: cuFFT plans made
    during its warm-up and capture); ``audit`` says who owns each address its nodes touch.
    """

    def __init__(self, steps: list[Any], outputs: Any, nbytes: int, held: Sequence[Any] = (),
                 replaced: Optional[dict[int, int]] = None, family: Any = None, binder_class: Any = None):
        """``replaced``: piece index -> an executable this recording owns from now on, made in place of
        CuPy's (PDL's re-instantiation). ``family``: the graph family's ``FamilyState``, bumped whenever
        what a compiled record of this recording describes changes. ``binder_class``: what re-points its
        banks per call (``zerocopy.binder.CupyBinder``, given by the backend), or None: every call copies."""
        self.steps = steps
        self._binder_class = binder_class
        self.family = family if family is not None else FamilyState()
        self.outputs = outputs
        self.nbytes = nbytes
        self.held = list(held)
        self.audit: Any = None
        self.watches = ()
        self.bindings: Any = None
        """What ``zerocopy.node_pointers.find_node_pointers`` found: which buffers the executable may be
        re-pointed away from."""
        self.graphs: Optional[RecordingGraphs] = None
        """The capture's one reading of its graphs (``driver/reading.py``), which topology reads too."""
        self._pieces = [step for step in steps if is_piece(step)]
        self._break_hook: Optional[Callable[[Any, Callable[[], None]], Callable[[], None]]] = None
        self._owned: list[int] = []
        handles = tuple(int(piece.graphExec) for piece in self._pieces)
        if replaced:
            handles = tuple(replaced.get(i, h) for i, h in enumerate(handles))
            self._owned.extend(replaced.values())
        self.banks: list[Bank] = [self._bank(handles)]
        self.active = self.banks[0]
        self._launch = self.active.launch

    # -- launching ----------------------------------------------------------------------------------

    def launch(self) -> None:
        self._launch()

    def use(self, bank: Bank) -> None:
        """Launch ``bank`` from now on."""
        self.active = bank
        self._launch = bank.launch

    def _bank(self, handles: tuple[int, ...]) -> Bank:
        launches: list[Callable[[], None]] = []
        pieces = iter(zip(self._pieces, handles))
        hook = self._break_hook
        for step in self.steps:
            if not is_piece(step):
                launches.append(step.launch if hook is None else hook(step.fn, step.launch))
                continue
            piece, handle = next(pieces)
            # CuPy's own executable launches through its Graph.launch (compiled: the cheapest call).
            own = handle == int(piece.graphExec)
            launches.append(piece.launch if own else functools.partial(_launch_handle, handle))
        launch = launches[0] if len(launches) == 1 else functools.partial(_run_all, tuple(launches))
        return Bank(len(getattr(self, "banks", ())), handles, launch, [])

    def set_break_hook(self, hook: Callable[[Any, Callable[[], None]], Callable[[], None]]) -> None:
        self._break_hook = hook
        for bank in self.banks:  # every launch made so far, made again with the hook
            bank.launch = self._bank(bank.handles).launch
        self._launch = self.active.launch

    @property
    def single(self) -> bool:
        """One graph and nothing else: each bank launches exactly one executable."""
        return len(self.steps) == 1 and len(self._pieces) == 1

    def handle(self, bank: Bank) -> int:
        """``bank``'s one executable (for ``cuGraphLaunch``), or 0 where it launches several steps."""
        return bank.handles[0] if self.single else 0

    # -- more executables -------------------------------------------------------------------------

    def add_bank(self, current: list[int]) -> Optional[Bank]:
        """A new instantiation of every piece (eager steps shared), uploaded on the current stream, its
        nodes holding the captured addresses ``current``; None when the driver refuses one (the
        caller then keeps the banks it has)."""
        drv = bindings()
        if drv is None:
            return None
        made: list[int] = []
        stream = _current_stream().ptr
        free = _free_device_memory()
        try:
            for piece in self._pieces:
                got = ok(drv.cuGraphInstantiate(drv.CUgraph(int(piece.graph)), 0))
                if got is None:
                    raise RuntimeError("cuGraphInstantiate refused a second executable")
                made.append(int(got[0]))
                _runtime.graphUpload(made[-1], stream)  # so its first launch costs what later ones do
        except Exception as err:
            logger.debug("cupygraph: no second executable for alternating addresses: %s", err)
            _destroy(made)
            return None
        self._owned.extend(made)
        bank = self._bank(tuple(made))
        bank.current = current
        after = _free_device_memory()
        # Nothing else allocates here (the pool is not asked), so the drop is the executables' own memory,
        # unless another thread or process allocated meanwhile (the reading is device-wide).
        bank.nbytes = max(0, free - after) if free is not None and after is not None else 0
        self.banks.append(bank)
        return bank

    def upload(self, stream: Any) -> None:
        """Upload every executable of the first bank, so the first replay costs what the others do."""
        for piece, handle in zip(self._pieces, self.banks[0].handles):
            if handle == int(piece.graphExec):
                piece.upload(stream)
            else:
                _runtime.graphUpload(handle, stream.ptr)

    # -- the rest ---------------------------------------------------------------------------------

    def binder(self, static: Sequence[Any], labels: Sequence[str], leaves: Sequence[Any], *, bind_outputs: bool,
               counts: Any, name: str, constants: Sequence[tuple[int, Any]] = (), executables: int = 1) -> Any:
        if self.bindings is None or self._binder_class is None:
            return None
        return self._binder_class(self.bindings, static, labels, leaves, bind_outputs, counts, name, constants, self,
                                  executables)

    @property
    def graph(self) -> Any:
        return self.steps[0] if self.steps else None

    @property
    def num_pieces(self) -> int:
        return len(self._pieces)

    def snapshot_of(self, graph: int) -> Any:
        """The capture's snapshot of the graph piece ``graph`` (read now where the capture read none)."""
        if self.graphs is None or graph not in self.graphs.tops:
            self.graphs = RecordingGraphs(self.steps, (), needed=True)
        return self.graphs.top(graph)

    def release(self) -> None:
        """Destroy the executables this recording made (CuPy's go with its graphs); a launch still
        running finishes first: the driver frees an executable in flight on completion."""
        owned, self._owned = self._owned, []
        _destroy(owned)
        self.steps = []
        self._pieces = []
        self.banks = []
        self.outputs = None
        self.held = []  # after the graphs: a plan is destroyed once nothing can launch its kernels
        self.bindings = None
        self.graphs = None
        self.watches = ()
        self._launch = _nothing

    def __del__(self) -> None:
        _destroy(getattr(self, "_owned", ()))

    def to_dot(self) -> str:
        # Verbose: kernel nodes then carry their function names and launch parameters.
        flags = getattr(_runtime, "graphDebugDotFlagsVerbose", getattr(_runtime, "cudaGraphDebugDotFlagsVerbose", 0))
        dots = []
        for piece in self._pieces:
            try:  # the conditional nodes (while_loop, cond, switch) as a note, from the capture's reading
                conditionals = conditional_nodes(self.snapshot_of(int(piece.graph)))
            except CupyGraphError:  # no cuda-bindings: the driver's DOT alone
                conditionals = []
            dots.append(with_conditional_legend(piece.debug_dot_str(flags), conditionals))
        return "\n".join(dots)


def _nothing() -> None:
    raise RuntimeError("this recording was released: its graphs are gone")


def _destroy(handles: Sequence[int]) -> None:
    drv = bindings() if handles else None
    if drv is None:
        return
    for handle in handles:
        try:
            drv.cuGraphExecDestroy(drv.CUgraphExec(handle))
        except Exception:  # at interpreter exit the driver may be gone already
            pass


def _free_device_memory() -> Optional[int]:
    """The current device's free memory (``cudaMemGetInfo``), or None where it cannot be read."""
    try:
        return int(_runtime.memGetInfo()[0])
    except Exception:  # a reading is never worth refusing an executable for
        return None
