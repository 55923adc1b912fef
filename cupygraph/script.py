"""Running a user's script for ``cupygraph inspect/dot --script``, as ``python script.py ARGS`` would."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .api.jit import on_creation
from .errors import CupyGraphError

if TYPE_CHECKING:
    from .api.jit import GraphedFunction


class ScriptError(CupyGraphError):
    """The script exited with a nonzero status or raised.

    ``status`` is the exit status to pass on; ``details`` is what the script would have printed on
    its way out (its own traceback, or the message it gave ``sys.exit``), empty when it printed it.
    """

    def __init__(self, message: str, status: int = 1, details: str = ""):
        super().__init__(message)
        self.status = status
        self.details = details


def _script_traceback(err: BaseException, path: str) -> str:
    """The traceback of an error the script raised, from the script's first frame on (no runpy frames)."""
    shown = traceback.TracebackException.from_exception(err)
    script = os.path.abspath(path)
    frames = list(shown.stack)
    first = next((i for i, frame in enumerate(frames) if os.path.abspath(frame.filename) == script), len(frames))
    shown.stack = traceback.StackSummary.from_list(frames[first:])
    return "".join(shown.format())


def _raised_inside(err: BaseException, path: str) -> bool:
    """Whether the script ran: a frame of its own is on ``err``'s traceback."""
    script = os.path.abspath(path)
    return any(os.path.abspath(frame.filename) == script for frame in traceback.extract_tb(err.__traceback__))


def run_script(path: str, argv: Sequence[str] = ()) -> list[GraphedFunction]:
    """Run ``path`` as ``__main__``; return the ``cupygraph.jit`` functions it created, in order.

    The script sees ``sys.argv == [path, *argv]`` and its own directory first on ``sys.path``, as
    under ``python path ARGS``; both are put back afterwards. ``sys.exit(0)`` is a normal end.
    """
    if os.path.isdir(path):
        raise CupyGraphError(f"--script {path}: is a directory; give the path of a Python script (a .py file)")
    if not os.path.isfile(path):
        raise CupyGraphError(f"--script {path}: no such file")
    functions: list[GraphedFunction] = []
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    unsubscribe = on_creation(functions.append)  # only what the script creates, kept alive
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is not None and code != 0:
            # argparse has already printed its usage error; sys.exit("text") prints the text on exit.
            status, details = (code, "") if isinstance(code, int) else (1, f"{code}\n")
            raise ScriptError(f"--script {path} exited with status {status}", status, details) from None
    except SyntaxError as err:
        if not _raised_inside(err, path):  # the file itself does not compile: not a script's error
            line = f" (line {err.lineno})" if err.lineno else ""
            raise ScriptError(f"--script {path} is not valid Python: {err.msg}{line}; fix it or give a Python "
                              f"script", details="".join(traceback.format_exception_only(err))) from None
        raise ScriptError(f"--script {path} raised SyntaxError (its traceback is above)",
                          details=_script_traceback(err, path)) from err
    except Exception as err:
        raise ScriptError(f"--script {path} raised {type(err).__name__} (its traceback is above)",
                          details=_script_traceback(err, path)) from err
    finally:
        unsubscribe()
        sys.argv = saved_argv
        sys.path[:] = saved_path
    if not functions:
        raise CupyGraphError(f"--script {path} created no cupygraph.jit functions")
    return functions
