"""Typed values instead of tuple protocols (issue 12): a call's ``Signature`` is made of typed parts,
explanations read them, and ``jit``'s options are one frozen ``JitOptions`` that mypy checks."""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cupygraph as cg
from cupygraph.api.options import JitOptions
from cupygraph.cache.key import BatchedArg, ConstArg, GraphKey, Kwargs, Namespace, Signature, StaticArg, WholeArg

HOST = {"backend": "host", "capture_sizes": [2, 4, 8]}


def scaled(x, w, bias, k, *, shift=0):
    return x * w.sum() * k + bias + shift


def rows(n: int, width: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, width))


def test_the_key_of_a_call_holds_one_typed_part_per_argument():
    f = cg.jit(scaled, config=HOST, static_argnums=3, constant_argnums=2)
    x, w, bias = rows(3), rows(1, 4)[0], rows(1)[0]
    np.testing.assert_array_equal(f(x, w, bias, 2, shift=1), scaled(x, w, bias, 2, shift=1))
    (entry,) = f.registry.entries()
    signature = entry.key.signature
    assert isinstance(signature, Signature)
    assert signature.args == (
        BatchedArg((3,), x.dtype),
        WholeArg((4,), w.dtype),
        ConstArg(bias.__array_interface__["data"][0], (3,), bias.dtype, bias.strides),
        StaticArg(int, 2),
    )
    assert signature.kwargs == Kwargs((("shift", int, 1),))
    assert signature.constants() == (signature.args[2],)
    assert ConstArg not in {type(p) for p in signature.without_constants().args}


def test_parts_of_different_kinds_never_compare_equal():
    # Each kind is its own type: a batched (n, 3) array and a whole (3,) array are different keys.
    assert BatchedArg((3,), np.dtype("f8")) != WholeArg((3,), np.dtype("f8"))
    assert StaticArg(int, 1) != StaticArg(bool, True) and StaticArg(int, 1) != StaticArg(float, 1.0)
    key = GraphKey(cg.BatchDescriptor(4), signature=Signature((StaticArg(int, 1),)))
    assert key == GraphKey(cg.BatchDescriptor(4), signature=Signature((StaticArg(int, 1),)))
    assert key != GraphKey(cg.BatchDescriptor(4), signature=Signature((StaticArg(float, 1.0),)))


def test_a_new_key_is_explained_by_the_part_that_changed(caplog):
    f = cg.jit(lambda x, k: x * k, config=HOST, static_argnums=1)
    with caplog.at_level(logging.DEBUG, logger="cupygraph"):
        f(rows(3), 2)
        f(rows(3), 3)
        f(rows(2), 3)
        f(rows(3, width=5), 3)
    said = [r.getMessage() for r in caplog.records if "captures" in r.getMessage()]
    assert len(said) == 4
    assert "first graph of this function" in said[0]
    assert "argument 1: static int 2 -> static int 3" in said[1]
    assert "new batch size 2 (held for this signature: [4])" in said[2]
    assert "argument 0: batched array float64[n, 3] -> batched array float64[n, 5]" in said[3]


def test_functions_sharing_a_manager_are_kept_apart_by_a_typed_namespace():
    manager = cg.CUDAGraphManager(HOST)

    def double(x):
        return x * 2

    def triple(x):
        return x * 3

    x = rows(3)
    np.testing.assert_array_equal(manager.execute_or_capture(3, None, double, [x]), x * 2)
    np.testing.assert_array_equal(manager.execute_or_capture(3, None, triple, [x]), x * 3)
    spaces = {e.key.signature.namespace for e in manager.registry.entries()}
    assert spaces == {Namespace("double", id(double)), Namespace("triple", id(triple))}


def test_jit_options_are_one_frozen_value_checked_when_given():
    options = JitOptions(batch_argnums=1, static_argnums=[0])
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batch_argnums = 2  # type: ignore[misc]
    f = cg.GraphedFunction(lambda k, x: x * k, options, registry=cg.CUDAGraphRegistry(cg.CUDAGraphConfig(**HOST)))
    assert (f.batch_argnums, f.static_argnums, f.options) == ((1,), (0,), options)
    # Wrong options fail where they are given: at decoration, before any function is seen.
    with pytest.raises(ValueError, match="argument 0 is in both batch_argnums and static_argnums"):
        cg.jit(static_argnums=0)
    with pytest.raises(TypeError, match="batch_argnum"):
        cg.jit(batch_argnum=0)
    with pytest.raises(ValueError, match=r"give batch_argnums .* or a descriptor_fn"):
        cg.jit(batch_argnums=())
    with pytest.raises(TypeError, match="not both"):
        cg.GraphedFunction(lambda x: x, options, batch_argnums=0)


def test_jit_overloads_type_check_from_the_one_option_list(tmp_path):
    pytest.importorskip("mypy")
    source = tmp_path / "uses_jit.py"
    source.write_text(textwrap.dedent("""
        import cupygraph as cg

        def f(x: int) -> int:
            return x

        reveal_type(cg.jit(f, batch_argnums=1))
        reveal_type(cg.jit(static_argnums=(1,)))

        @cg.jit(config={"backend": "host"}, out_batched=True)
        def g(x: int) -> int:
            return x

        reveal_type(g)
        cg.jit(f, batch_argnum=1)
        cg.jit(f, constant_argnums="0")
    """))
    # In a child process run from the project root: mypy finds this checkout's cupygraph there and
    # leaves the environment of this process alone.
    root = pathlib.Path(cg.__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                           str(source)], cwd=root, capture_output=True, text=True)
    out = done.stdout
    lines = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(source))]
    assert lines[0] == 'note: Revealed type is "cupygraph.api.jit.GraphedFunction"'
    assert lines[1].startswith("note: Revealed type is \"def [F <: def (*Any, **Any) -> Any] (F) -> ")
    assert lines[2] == 'note: Revealed type is "cupygraph.api.jit.GraphedFunction"'
    assert any('Unexpected keyword argument "batch_argnum"' in line for line in lines[3:])
    assert any('"constant_argnums"' in line and "incompatible type" in line for line in lines[3:])
