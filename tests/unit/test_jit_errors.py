"""Mistakes at the front door get clear errors naming the argument, dtype, value or size."""

from __future__ import annotations

import numpy as np
import pytest

import cupygraph as cg

HOST = dict(backend="host", max_capture_size=16)


def test_a_numpy_scalar_in_a_batch_position_names_the_argument():
    f = cg.jit(lambda x: x * 2, config=HOST)
    with pytest.raises(cg.InputMismatchError, match=r"argument 0 of <lambda>\(\) is in batch_argnums but is a "
                                                     r"NumPy scalar numpy\.float32 \(np\.float32\(3\.0\)\)"):
        f(np.float32(3))


def test_an_object_array_names_the_argument():
    f = cg.jit(lambda x, y: x + y, config=HOST)
    with pytest.raises(cg.InputMismatchError, match=r"argument 1 of <lambda>\(\) is an object array "
                                                     r"\(object\[2\]"):
        f(np.ones((3, 2)), np.array([1, "a"], dtype=object))
    with pytest.raises(cg.InputMismatchError, match=r"argument 0 .* object array"):
        f(np.empty((3, 2), dtype=object), np.ones(2))


def test_a_masked_array_is_refused_also_after_a_plain_call_of_its_shape():
    f = cg.jit(lambda x: x * 2, config=HOST)
    plain = np.ones((3, 2))
    f(plain)
    f(plain)  # the fast path knows this shape now
    masked = np.ma.masked_array(plain, mask=[[True, False]] * 3)
    with pytest.raises(cg.InputMismatchError, match=r"argument 0 .* masked array .* drop the mask"):
        f(masked)


@pytest.mark.parametrize(
    ("pad_value", "dtype", "words"),
    [
        (-1, np.uint8, "outside the range of uint8 (0..255)"),
        (float("nan"), np.int32, "not finite, so it cannot pad int32"),
        (2.7, np.int32, "not a whole number, so it cannot pad int32"),
        (1e300, np.float16, "overflows float16 (largest 65504)"),
        (1e300, np.complex64, "overflows complex64"),
        (2, np.bool_, "not a bool (0 or 1)"),
    ],
)
def test_a_pad_value_that_does_not_fit_the_dtype_is_an_error_when_the_key_is_made(pad_value, dtype, words):
    f = cg.jit(lambda x: x + 1, config=dict(HOST, pad_value=pad_value))
    x = np.ones((4, 2), dtype=dtype)  # 4 rows: a capture size, so no padding row is ever written
    with pytest.raises(cg.InputMismatchError) as info:
        f(x)
    message = str(info.value)
    assert f"pad_value={pad_value!r}" in message and "argument 0 of <lambda>()" in message
    assert f"({np.dtype(dtype)})" in message and words in message
    assert f.registry.num_graphs() == 0 and f.stats().capture_failures == 0


@pytest.mark.parametrize(("pad_value", "dtype"), [(255, np.uint8), (-3, np.int32), (2.0, np.int64),
                                                  (float("nan"), np.float32), (float("inf"), np.float16),
                                                  (60000, np.float16), (1, np.bool_)])
@pytest.mark.filterwarnings("ignore::cupygraph.ForeignMemoryWarning")  # `seen` is a closure list
def test_a_pad_value_that_fits_is_written_exactly(pad_value, dtype):
    seen = []
    f = cg.jit(lambda x: seen.append(x.copy()) or x * 1, config=dict(HOST, pad_value=pad_value, num_warmups=0))
    f(np.zeros((3, 2), dtype=dtype))
    padding = seen[1][3]  # the capture run's buffer (the call itself ran first, on its own 3 rows)
    assert np.array_equal(padding, np.full(2, pad_value, dtype=dtype), equal_nan=np.dtype(dtype).kind == "f")


def test_warmup_checks_the_pad_value_before_allocating():
    f = cg.jit(lambda x: x + 1, config=dict(HOST, pad_value=-1))
    with pytest.raises(cg.InputMismatchError, match=r"pad_value=-1 .* \(uint8\)"):
        f.warmup(np.ones((1, 2), np.uint8), progress=False)


def test_call_with_descriptor_with_fewer_tokens_than_rows_names_both():
    f = cg.jit(lambda x: x * 2, config=HOST)
    x = np.ones((5, 2))
    with pytest.raises(cg.InputMismatchError, match=r"num_tokens=3 but the batched arguments have 5 rows"):
        f.call_with_descriptor(cg.BatchDescriptor(3), x)
    assert np.array_equal(f.call_with_descriptor(cg.BatchDescriptor(6), x), x * 2)  # more tokens: padded
    assert np.array_equal(f.call_with_descriptor(np.int64(5), x), x * 2)


@pytest.mark.parametrize("bad", [0.0, "0", None, [0, 1.5], (True,)])
def test_bad_argnums_say_what_they_must_be(bad):
    with pytest.raises(TypeError, match=r"batch_argnums must (be an argument position|hold non-negative)"):
        cg.jit(lambda x: x, config=HOST, batch_argnums=bad)


def test_numpy_integers_are_accepted_as_argnums_sizes_and_descriptors():
    f = cg.jit(lambda x, y: x * y, config=HOST, batch_argnums=np.int64(0), static_argnums=[np.int32(1)])
    assert f.batch_argnums == (0,) and f.static_argnums == (1,)
    assert f.warmup(np.ones((1, 2)), 3, sizes=np.arange(1, 5), progress=False) == 3  # 1, 2, 4 (3 pads to 4)
    g = cg.jit(lambda x: x + 1, config=HOST, descriptor_fn=lambda x: np.int64(x.shape[0]))
    assert np.array_equal(g(np.ones((3, 2))), np.full((3, 2), 2.0))
    registry = cg.CUDAGraphRegistry(cg.CUDAGraphConfig(backend="host", max_capture_size=8))
    entry = registry.capture(np.int64(3), None, lambda x: x * 2, [(3, 2)])
    assert entry.key.descriptor.num_tokens == 4


@pytest.mark.parametrize("sizes", [[-3], [0], [17, 4, 600], [2.5], [True]])
def test_warmup_names_the_sizes_it_cannot_capture(sizes):
    f = cg.jit(lambda x: x * 2, config=HOST)
    bad = [s for s in sizes if not (isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 16)]
    with pytest.raises(ValueError, match=r"cannot capture sizes") as info:
        f.warmup(np.ones((1, 2)), sizes=sizes, progress=False)
    assert str(bad) in str(info.value) and "largest capture size 16" in str(info.value)
    assert f.registry.num_graphs() == 0


def test_an_argument_both_static_and_constant_is_refused_at_jit_time():
    with pytest.raises(ValueError, match=r"argument 1 is in both static_argnums and constant_argnums"):
        cg.jit(lambda x, w: x * w, static_argnums=1, constant_argnums=(2, 1), config=HOST)


def test_a_descriptor_fn_that_is_not_callable_is_refused_at_jit_time():
    with pytest.raises(TypeError, match=r"descriptor_fn must be a callable .*got int 3"):
        cg.jit(lambda x: x, descriptor_fn=3, config=HOST)


@pytest.mark.parametrize("option", ["batch_argnums", "static_argnums", "constant_argnums"])
def test_an_argument_position_past_the_functions_parameters_is_refused_at_jit_time(option):
    def add(x, y):
        return x + y

    options = {"batch_argnums": 0, option: (0, 5) if option == "batch_argnums" else 5}
    with pytest.raises(ValueError, match=rf"{option} holds 5, but add\(\) takes 2 positional arguments \(0 to 1\)"):
        cg.jit(add, **options, config=HOST)


def test_argument_positions_of_a_function_with_star_args_are_not_bounded():
    f = cg.jit(lambda x, *rest: x + len(rest), static_argnums=3, config=HOST)
    assert f(np.ones((2, 2)), 1, 2, 3).tolist() == [[4.0, 4.0]] * 2


@pytest.mark.parametrize("examples, problem", [
    ((np.ones((2, 3)),), "missing a required argument: 'y'"),
    ((np.ones((2, 3)), np.ones(3), np.ones(3)), "too many positional arguments"),
])
def test_warmup_examples_that_do_not_fit_the_function_are_an_error_and_mark_no_key(examples, problem):
    """Regression: every size's capture failed inside with the function's TypeError, warmup() returned 0
    and each key was remembered as failed."""
    def add(x, y):
        return x + y

    f = cg.jit(add, config=dict(backend="host", capture_sizes=[1, 2, 4]))
    with pytest.raises(TypeError, match=rf"add\.warmup\(\): the example arguments do not fit add\(x, y\): {problem}"):
        f.warmup(*examples)
    stats = f.stats()
    assert stats.captures == 0 and stats.capture_failures == 0
    assert f.warmup(np.ones((2, 3)), np.ones(3)) == 3


def test_a_methods_warmup_examples_are_checked_without_self():
    class Model:
        @cg.jit(config=dict(backend="host", capture_sizes=[1, 2]), batch_argnums=1)
        def forward(self, x, scale):
            return x * scale

    model = Model()
    with pytest.raises(TypeError, match=r"missing a required argument: 'scale'"):
        model.forward.warmup(np.ones((2, 3)))
    assert model.forward.warmup(np.ones((2, 3)), 2.0) == 2


@pytest.mark.parametrize("progress", ["no", 0, None])
def test_warmup_progress_must_be_a_bool(progress):
    """Regression: progress="no" was truthy and showed the bar."""
    f = cg.jit(lambda x: x + 1, config=dict(backend="host", capture_sizes=[1, 2]))
    with pytest.raises(TypeError, match=rf"<lambda>\.warmup\(\): progress must be True or False, got "
                                        rf"{type(progress).__name__}"):
        f.warmup(np.ones((2, 3)), progress=progress)
    assert f.stats().captures == 0
