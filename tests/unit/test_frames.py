"""Fallback reasons name the user's own line, whatever form the library frames' paths take.

On the GPU, CuPy's compiled frames carry relative paths (``cupy/_core/core.pyx``) and module names
like ``cupy._core.core``; these tests build such frames on the CPU by executing code compiled with
those file names, so the frame picker is checked without CuPy.
"""

from __future__ import annotations

import linecache
import sys

import pytest

from cupygraph.frames import is_library_file, location_in_stack, location_in_traceback

OP_SOURCE = "def op(x):\n    raise RuntimeError('operation not permitted when stream is capturing')\n"


def library_op(filename: str, module: object):
    """``op`` defined in code compiled as ``filename``, in a module namespace called ``module``."""
    namespace: dict = {} if module is None else {"__name__": module}
    exec(compile(OP_SOURCE, filename, "exec"), namespace)
    return namespace["op"]


@pytest.fixture
def source_lines():
    """Register source text for made-up file names (so a location can show the code); removed after."""
    added = []

    def register(filename: str, source: str) -> None:
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        added.append(filename)

    yield register
    for filename in added:
        linecache.cache.pop(filename, None)


def failing_user_call(op):
    try:
        op(1)  # the user's line
    except RuntimeError as err:
        return err
    raise AssertionError("op did not raise")


USER_LINE = failing_user_call.__code__.co_firstlineno + 2


@pytest.mark.parametrize(
    ("filename", "module"),
    [
        ("cupy/_core/core.pyx", "cupy._core.core"),  # what CuPy's Cython frames look like
        ("cupy/_core/core.pyx", None),  # no module name: the relative path alone tells
        ("core.pyx", "cupy._core.core"),  # a bare file name: the module alone tells
        ("cupy_backends/cuda/api/runtime.pyx", "cupy_backends.cuda.api.runtime"),
        ("/opt/venv/lib/python3.12/site-packages/cupyx/scipy/fft/_fft.py", "elsewhere"),
        ("C:\\Python312\\Lib\\site-packages\\cupy\\linalg\\_product.py", None),
    ],
)
def test_the_innermost_user_frame_is_named_not_the_library_frame(filename, module):
    err = failing_user_call(library_op(filename, module))
    assert location_in_traceback(err) == f" (at test_frames.py:{USER_LINE}: op(1)  # the user's line)"


def test_a_user_file_in_a_folder_called_like_a_library_is_still_the_users(source_lines):
    filename = "/home/someone/cupygraph/examples/model.py"
    source_lines(filename, OP_SOURCE)
    err = failing_user_call(library_op(filename, "__main__"))
    assert location_in_traceback(err) == (
        " (at model.py:2: raise RuntimeError('operation not permitted when stream is capturing'))"
    )


def test_a_frame_without_source_keeps_file_and_line():
    err = failing_user_call(library_op("<generated>", "__main__"))
    assert location_in_traceback(err) == " (at <generated>:2)"


def test_only_library_frames_give_no_location():
    op = library_op("cupy/_core/core.pyx", "cupy._core.core")
    try:
        op(1)
    except RuntimeError as err:
        err.__traceback__ = err.__traceback__.tb_next  # drop this test's own frame
        assert location_in_traceback(err) == ""


def test_library_file_forms():
    assert is_library_file("cupy/_core/_routines_linalg.pyx")
    assert is_library_file("/usr/lib/python3/dist-packages/numpy/linalg/_linalg.py")
    assert is_library_file(sys.modules["cupygraph"].__file__)
    assert not is_library_file("/home/someone/cupy-experiments/model.py")
    assert not is_library_file("model.py")
    assert not is_library_file("<stdin>")


def test_the_stack_walk_skips_library_frames_outwards():
    # A refusal raised in cupygraph, reached through a NumPy function, from the user's line.
    namespace = {"__name__": "cupygraph.backends.guards.host_guard", "sys": sys, "location_in_stack": location_in_stack}
    exec(compile("def refuse():\n    return location_in_stack(sys._getframe())\n", "cupygraph/guard.py", "exec"),
         namespace)
    exec(compile("def mean(x):\n    return refuse()\n", "numpy/_core/_methods.py", "exec"), namespace)
    where = namespace["mean"](1)  # the user's line
    line = sys._getframe().f_lineno - 1
    assert where == f" (at test_frames.py:{line}: where = namespace[\"mean\"](1)  # the user's line)"
