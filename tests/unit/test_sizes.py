"""Padding, size helpers and BatchDescriptor: property tests and the validation of each field."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cupygraph.compat.aliases import DispatchKey
from cupygraph.config.model import CUDAGraphConfig, CUDAGraphMode
from cupygraph.config.sizes import (
    check_positive_int,
    decode_capture_sizes,
    decode_ladder_problem,
    default_capture_sizes,
    default_max_capture_size,
    normalise_sizes,
    outside_token_limits,
    pad_to_capture_size,
)
from cupygraph.dispatch.decision import capture_ladders
from cupygraph.dispatch.descriptor import (
    BatchDescriptor,
    create_dispatch_key,
    get_cudagraph_sizes,
    get_padded_key,
)
from cupygraph.errors import ConfigError

M = CUDAGraphMode

size_lists = st.lists(st.integers(1, 4096), min_size=1, max_size=64).map(lambda s: sorted(set(s)))


# -- padding properties ----------------------------------------------------------------------------


@given(sizes=size_lists, n=st.integers(1, 5000))
def test_padding_is_the_smallest_size_at_least_n(sizes, n):
    padded = pad_to_capture_size(n, sizes)
    if n > sizes[-1]:
        assert padded is None
    else:
        assert padded in sizes and padded >= n
        assert not [s for s in sizes if n <= s < padded]


@given(sizes=size_lists)
def test_every_capture_size_pads_to_itself(sizes):
    assert [pad_to_capture_size(s, sizes) for s in sizes] == sizes


@given(max_size=st.integers(1, 2048), n=st.integers(1, 2100))
def test_config_padding_matches_the_default_sizes(max_size, n):
    config = CUDAGraphConfig(max_capture_size=max_size)
    sizes = default_capture_sizes(max_size)
    assert list(config.cudagraph_capture_sizes) == sizes
    padded = config.get_padded_batch_size(n)
    assert padded == min((s for s in sizes if s >= n), default=None)
    assert config.should_use_cudagraph(n) is (padded is not None)


@given(max_size=st.integers(1, 4096))
@example(1)
@example(3)
@example(7)
@example(255)
@example(271)
def test_default_sizes_shape(max_size):
    sizes = default_capture_sizes(max_size)
    assert sizes == sorted(set(sizes)) and sizes[0] == 1 and sizes[-1] <= max_size
    # The gap to max_capture_size is never more than one step of the schedule.
    step = 2 if max_size < 4 else 4 if max_size < 8 else 8 if max_size < 256 else 16
    assert max_size - sizes[-1] < step


def test_default_sizes_for_512():
    assert default_capture_sizes(512) == [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]
    assert len(default_capture_sizes(512)) == 51


@given(st.lists(st.integers(1, 10_000), max_size=50))
def test_normalise_sizes_sorts_and_deduplicates(raw):
    assert normalise_sizes(raw) == sorted(set(raw))


@pytest.mark.parametrize("bad, index", [([1, 0], 1), ([-3], 0), ([1, 2, True], 2), ([1, "8"], 1), ([2.0], 0)])
def test_normalise_sizes_names_the_bad_index(bad, index):
    with pytest.raises((TypeError, ValueError), match=rf"capture_sizes\[{index}\]"):
        normalise_sizes(bad)


@pytest.mark.parametrize("bad", [0, -1, True, False, 1.0, "3", None])
def test_check_positive_int_rejects(bad):
    with pytest.raises((TypeError, ValueError), match="num_tokens must be a positive integer"):
        check_positive_int(bad, "num_tokens")


# -- BatchDescriptor -------------------------------------------------------------------------------


def test_descriptor_defaults_and_alias():
    d = BatchDescriptor(8)
    assert (d.num_tokens, d.num_reqs, d.uniform_decode, d.seq_len) == (8, None, False, None)
    assert d.is_prefill and DispatchKey is BatchDescriptor


@pytest.mark.parametrize("kwargs, field", [
    (dict(num_tokens=0), "num_tokens"),
    (dict(num_tokens=-4), "num_tokens"),
    (dict(num_tokens=2.0), "num_tokens"),
    (dict(num_tokens="8"), "num_tokens"),
    (dict(num_tokens=True), "num_tokens"),
    (dict(num_tokens=8, num_reqs=0), "num_reqs"),
    (dict(num_tokens=8, num_reqs=False), "num_reqs"),
    (dict(num_tokens=8, seq_len=-1), "seq_len"),
    (dict(num_tokens=8, seq_len=1.5), "seq_len"),
    (dict(num_tokens=8, uniform_decode=1), "uniform_decode"),
    (dict(num_tokens=8, uniform_decode="yes"), "uniform_decode"),
])
def test_descriptor_validation_names_the_field(kwargs, field):
    with pytest.raises((TypeError, ValueError), match=field):
        BatchDescriptor(**kwargs)


def test_descriptor_is_a_hashable_frozen_key():
    a = BatchDescriptor(8, 8, True)
    assert a == BatchDescriptor(8, 8, True) and hash(a) == hash(BatchDescriptor(8, 8, True))
    assert a != BatchDescriptor(8, 8, False)
    assert len({a, BatchDescriptor(8, 8, True), a.relaxed()}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.num_tokens = 16  # type: ignore[misc]


@given(n=st.integers(1, 10_000), reqs=st.none() | st.integers(1, 10_000), uniform=st.booleans(),
       seq=st.none() | st.integers(1, 10_000))
def test_relaxed_drops_reqs_and_uniformity_only(n, reqs, uniform, seq):
    d = BatchDescriptor(n, reqs, uniform, seq)
    r = d.relaxed()
    assert (r.num_tokens, r.num_reqs, r.uniform_decode, r.seq_len) == (n, None, False, seq)
    assert r.relaxed() == r


def test_create_dispatch_key():
    prefill = create_dispatch_key(32, num_reqs=4, max_seq_len=128)
    assert prefill == BatchDescriptor(32, 4, uniform_decode=False, seq_len=128) and prefill.is_prefill
    decode = create_dispatch_key(16, num_reqs=16, is_prefill=False)
    assert decode.uniform_decode and not decode.is_prefill and decode.seq_len is None
    with pytest.raises(ValueError, match="num_tokens"):
        create_dispatch_key(0)


@given(n=st.integers(1, 1000), extra=st.integers(0, 1000))
def test_get_padded_key_keeps_the_rest(n, extra):
    key = BatchDescriptor(n, 3, True, 64)
    padded = get_padded_key(key, n + extra)
    assert padded == dataclasses.replace(key, num_tokens=n + extra)
    assert key.num_tokens == n  # the original is untouched


def test_get_padded_key_rejects_shrinking_and_bad_sizes():
    with pytest.raises(ValueError, match="pad_to=4 is smaller than the key's num_tokens=8"):
        get_padded_key(BatchDescriptor(8), 4)
    for bad in (0, True, 8.0):
        with pytest.raises((TypeError, ValueError), match="pad_to"):
            get_padded_key(BatchDescriptor(8), bad)


# -- get_cudagraph_sizes ---------------------------------------------------------------------------


def test_cudagraph_sizes_none_mode_is_empty():
    assert get_cudagraph_sizes([1, 2, 4], 8, 512, M.NONE) == []
    assert get_cudagraph_sizes(None, None, None, "none") == []


def test_cudagraph_sizes_defaults():
    assert get_cudagraph_sizes(None, None, None, M.FULL) == default_capture_sizes(512)
    assert get_cudagraph_sizes(None, None, 64, M.PIECEWISE) == default_capture_sizes(64)


def test_cudagraph_sizes_explicit_are_normalised_and_clipped_to_max_tokens():
    assert get_cudagraph_sizes([64, 1, 8, 8, 512], None, 100, M.FULL) == [1, 8, 64]
    with pytest.raises(ValueError, match=r"capture_sizes\[1\]"):
        get_cudagraph_sizes([1, 0], None, None, M.FULL)


@pytest.mark.parametrize("mode, expected", [
    (M.FULL_DECODE_ONLY, [1, 2, 4, 8, 16]),        # FULL graphs serve decode only: stop at max_num_reqs
    (M.FULL_AND_PIECEWISE, [1, 2, 4, 8, 16, 32, 64]),
    (M.FULL, [1, 2, 4, 8, 16, 32, 64]),
    (M.PIECEWISE, [1, 2, 4, 8, 16, 32, 64]),
])
def test_cudagraph_sizes_by_mode(mode, expected):
    assert get_cudagraph_sizes([1, 2, 4, 8, 16, 32, 64], 16, 64, mode) == expected


def test_cudagraph_sizes_validates_limits():
    with pytest.raises(ValueError, match="max_num_tokens"):
        get_cudagraph_sizes(None, None, 0, M.FULL)
    with pytest.raises(ValueError, match="max_num_reqs"):
        get_cudagraph_sizes(None, -1, None, M.FULL)
    with pytest.raises(ValueError, match="unknown CUDA graph mode"):
        get_cudagraph_sizes(None, None, None, "sometimes")


# -- NumPy integers (issue 11) ---------------------------------------------------------------------


def test_numpy_integers_are_sizes_and_keys():
    import numpy as np

    assert normalise_sizes(np.arange(1, 5)) == [1, 2, 3, 4]
    assert all(type(s) is int for s in normalise_sizes(np.array([8, 2], dtype=np.int32)))
    assert check_positive_int(np.uint8(3), "n") == 3 and type(check_positive_int(np.int64(3), "n")) is int
    d = BatchDescriptor(np.int64(8), np.int32(2), seq_len=np.int16(64))
    assert (type(d.num_tokens), type(d.num_reqs), type(d.seq_len)) == (int, int, int)
    assert d == BatchDescriptor(8, 2, seq_len=64) and repr(d) == repr(BatchDescriptor(8, 2, seq_len=64))
    assert get_cudagraph_sizes(np.array([4, 1, 2]), np.int64(2), np.int64(4), M.FULL) == [1, 2, 4]
    for bad in (np.bool_(True), np.float64(2.0)):
        with pytest.raises(TypeError, match="num_tokens must be a positive integer"):
            BatchDescriptor(bad)


# -- vLLM parity of sizes (issue 21) ---------------------------------------------------------------
# Each case is a rule vLLM documents for max_cudagraph_capture_size / cudagraph_capture_sizes
# (vllm/config/compilation.py, VllmConfig._set_cudagraph_sizes) or asserts in its tests, in
# cupygraph's terms: max_num_seqs is max_num_reqs, the speculative query length is
# uniform_decode_query_len.

VLLM_DEFAULT = [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)]


@pytest.mark.parametrize("max_num_reqs, q, largest", [
    (None, 1, 512), (128, 1, 256), (256, 1, 512), (300, 1, 512), (8, 1, 16), (1, 1, 2),
    (64, 2, 256), (80, 3, 480), (100, 3, 512),
])
def test_default_largest_size_follows_the_request_limit(max_num_reqs, q, largest):
    """Regression (issue 21, item 1): CUDAGraphConfig(max_num_reqs=128) captured up to 512."""
    assert default_max_capture_size(max_num_reqs, q) == largest
    c = CUDAGraphConfig(mode="PIECEWISE", max_num_reqs=max_num_reqs, uniform_decode_query_len=q)
    assert c.max_capture_size == largest  # PIECEWISE: no rounding to the query length
    assert list(c.cudagraph_capture_sizes) == [s for s in VLLM_DEFAULT if s <= largest]


def test_default_largest_size_for_128_requests_is_256():
    c = CUDAGraphConfig(max_num_reqs=128)
    assert c.max_capture_size == 256 == c.largest_capture_size and len(c.cudagraph_capture_sizes) == 35
    assert c.get_padded_batch_size(256) == 256 and c.get_padded_batch_size(257) is None
    assert not c.should_use_cudagraph(300)


def test_explicit_settings_win_over_the_request_limit():
    assert CUDAGraphConfig(max_num_reqs=128, max_capture_size=512).largest_capture_size == 512
    assert CUDAGraphConfig(max_num_reqs=8, capture_sizes=[1, 64]).max_capture_size == 64
    # A config written back and read again keeps its sizes (the derived maximum is written out).
    c = CUDAGraphConfig(max_num_reqs=128)
    assert CUDAGraphConfig.from_dict(c.to_dict()) == c and c.to_dict()["max_capture_size"] == 256
    assert c.replace(max_num_reqs=32).max_capture_size == 64  # derived again, not kept at 256


def test_get_cudagraph_sizes_stops_where_vllm_does():
    """Regression (issue 21, item 1): the defaults went up to the token limit (2048)."""
    sizes = get_cudagraph_sizes(None, 128, 2048, M.FULL_AND_PIECEWISE)
    assert sizes == [s for s in VLLM_DEFAULT if s <= 256]
    assert get_cudagraph_sizes(None, None, 2048, M.FULL) == VLLM_DEFAULT  # 512 without a request limit
    assert get_cudagraph_sizes(None, 128, 100, M.PIECEWISE)[-1] == 96  # and never past the token limit
    # Under speculative decoding the sizes are not rounded (issue 33): only FULL_DECODE_ONLY, whose
    # graphs are all uniform-decode ones, captures the rounded ladder itself.
    assert get_cudagraph_sizes(None, 8, None, M.FULL_AND_PIECEWISE, 3) == [1, 2, 4, 8, 16, 24, 32, 40, 48]
    assert get_cudagraph_sizes(None, 8, None, M.FULL_DECODE_ONLY, 3) == [3, 6, 9, 18, 24]


def round_up(size, q):
    return -(-size // q) * q


@pytest.mark.parametrize("mode", ["FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_capture_sizes_are_not_rounded_each_mode_keeps_its_ladder(mode):
    """Issue 33: the config's sizes stay as given under a query length above 1; only the FULL
    uniform-decode graphs of separate-routine modes sit on them rounded up (vLLM's per-mode
    candidates), within the largest size."""
    c = CUDAGraphConfig(mode=mode, uniform_decode_query_len=3)
    assert c.cudagraph_capture_sizes == tuple(VLLM_DEFAULT)
    assert c.largest_capture_size == 512 == c.max_capture_size
    decode = tuple(sorted({round_up(s, 3) for s in VLLM_DEFAULT} - {513}))
    assert decode[:8] == (3, 6, 9, 18, 24, 33, 42, 48) and decode[-1] == 498  # 512 -> 513 passes 512
    expected = {
        "FULL": {M.FULL: tuple(VLLM_DEFAULT)},  # one routine: uniform-decode batches use the mixed graphs
        "FULL_DECODE_ONLY": {M.FULL: decode},
        "FULL_AND_PIECEWISE": {M.PIECEWISE: tuple(VLLM_DEFAULT), M.FULL: decode},
    }[mode]
    assert capture_ladders(c) == expected
    assert CUDAGraphConfig.from_dict(c.to_dict()) == c


def test_no_decode_ladder_without_full_decode_graphs_of_their_own():
    assert capture_ladders(CUDAGraphConfig(mode="PIECEWISE", uniform_decode_query_len=3)) == {
        M.PIECEWISE: tuple(VLLM_DEFAULT)}
    assert CUDAGraphConfig(mode="FULL_AND_PIECEWISE").cudagraph_capture_sizes[:3] == (1, 2, 4)


@pytest.mark.parametrize("sizes, q, max_num_reqs, expected", [
    ([1, 2, 4, 8, 16, 24], 3, 8, (3, 6, 9, 18, 24)),  # vLLM's test ladder
    ([1, 2, 4, 8], 3, None, (3, 6)),                  # 8 -> 9 passes the largest size (8): dropped
    ([1, 2, 4, 8, 16, 24], 3, 4, (3, 6, 9)),          # 18 is more than 4 requests of 3
    ([2, 4, 6, 8], 2, None, (2, 4, 6, 8)),            # already multiples: unchanged
    ([5, 10], 5, None, (5, 10)),
    ([4], 3, None, ()),                               # 6 passes 4, and vLLM adds no size of its own
])
def test_decode_ladder_rounds_up_within_both_caps(sizes, q, max_num_reqs, expected):
    assert decode_capture_sizes(sizes, q, max_num_reqs) == expected
    assert (decode_ladder_problem(sizes, q, max_num_reqs) is None) is bool(expected)


@pytest.mark.parametrize("sizes, q", [([1, 2, 4, 8], 3), ([2, 4, 6, 8], 2), ([5, 10], 5)])
def test_explicit_sizes_are_kept_as_given(sizes, q):
    c = CUDAGraphConfig(mode="FULL_AND_PIECEWISE", capture_sizes=sizes, uniform_decode_query_len=q)
    assert c.cudagraph_capture_sizes == tuple(sizes) == c.capture_sizes and c.max_capture_size == max(sizes)
    assert capture_ladders(c)[M.FULL] == decode_capture_sizes(sizes, q, None)


@pytest.mark.parametrize("mode", ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
@pytest.mark.parametrize("fields, why", [
    (dict(capture_sizes=[1, 2]), "above the largest capture size 2; lower the query length or raise "
                                 "max_capture_size"),
    (dict(capture_sizes=[4]), "above the largest capture size 4"),
    (dict(capture_sizes=[4, 8], max_num_reqs=1), "above the largest capture size 8 and max_num_reqs x 3 = 3; "
                                                 "lower the query length or raise max_capture_size or max_num_reqs"),
])
def test_a_mode_left_without_decode_graphs_is_refused_naming_the_fields(mode, fields, why):
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(mode=mode, uniform_decode_query_len=3, **fields)
    message = str(info.value)
    assert "field 'uniform_decode_query_len'" in message and "rounded up to multiples of 3" in message
    assert why in message
    # Modes without uniform-decode graphs of their own keep the sizes and need no decode ladder.
    for other in ("FULL", "PIECEWISE"):
        assert CUDAGraphConfig(mode=other, uniform_decode_query_len=3, **fields).capture_sizes == tuple(
            fields["capture_sizes"])


@pytest.mark.parametrize("sizes, largest", [([1, 2, 4], 8), ([1, 2, 4], 2), ([8], 16), ([16], 8)])
def test_inconsistent_explicit_sizes_and_max_are_refused(sizes, largest):
    """Regression (issue 21, item 3): capture_sizes=[1, 2, 4] with max_capture_size=8 kept 8 as the
    maximum while batches of 5..8 ran eagerly; vLLM refuses the pair naming both fields."""
    with pytest.raises(ConfigError) as info:
        CUDAGraphConfig(capture_sizes=sizes, max_capture_size=largest)
    message = str(info.value)
    assert "field 'max_capture_size'" in message and f"max_capture_size={largest}" in message
    assert "capture_sizes" in message and str(max(sizes)) in message


@pytest.mark.parametrize("fields", [
    dict(capture_sizes=[]), dict(max_capture_size=0), dict(capture_sizes=[], max_capture_size=0),
    dict(capture_sizes=[1, 2], max_capture_size=0),  # nothing is captured, so nothing to disagree
])
def test_mode_none_accepts_nothing_to_capture(fields):
    """Regression (issue 21, item 4): vLLM accepts mode NONE with no sizes; cupygraph raised, with a
    message that suggested mode NONE."""
    c = CUDAGraphConfig(mode="NONE", **fields)
    assert c.cudagraph_capture_sizes == () and c.largest_capture_size is None
    assert not c.should_use_cudagraph(1) and c.get_padded_batch_size(1) is None
    assert CUDAGraphConfig.from_dict(c.to_dict()) == c


@pytest.mark.parametrize("mode", ["FULL", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_graph_modes_still_need_something_to_capture(mode):
    with pytest.raises(ConfigError, match=r"field 'capture_sizes': the list is empty.*set mode: NONE"):
        CUDAGraphConfig(mode=mode, capture_sizes=[])
    with pytest.raises(ConfigError, match=r"field 'max_capture_size'.*only under mode NONE"):
        CUDAGraphConfig(mode=mode, max_capture_size=0)


def test_mode_none_with_no_sizes_runs_eagerly_in_a_jit(monkeypatch):
    import numpy as np

    from cupygraph import jit

    monkeypatch.delenv("CUPYGRAPH_DISABLE", raising=False)
    f = jit(lambda x: x + 1, config=dict(backend="host", mode="NONE", capture_sizes=[]))
    x = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(f(x), x + 1) and f.registry.num_graphs() == 0


def test_mode_none_with_no_sizes_in_files(tmp_path):
    from cupygraph.config.files import load_config

    (tmp_path / "off.yaml").write_text("mode: NONE\ncapture_sizes: []\n", encoding="utf-8")
    (tmp_path / "off.toml").write_text('mode = "none"\nmax_capture_size = 0\n', encoding="utf-8")
    for name in ("off.yaml", "off.toml"):
        assert load_config(tmp_path / name).cudagraph_capture_sizes == ()


@pytest.mark.parametrize("capture_sizes, max_capture_size, mode, largest", [
    # vLLM's tests/compile/test_config.py::test_cudagraph_sizes_post_init, with max_num_seqs 128
    # (max_num_reqs here) and no sequence parallelism; "largest" is the largest size captured.
    (None, None, "FULL_AND_PIECEWISE", 256),
    ([1, 2, 4], 4, "FULL_AND_PIECEWISE", 4),
    ([1, 2, 4], 8, "FULL_AND_PIECEWISE", ConfigError),
    ([1, 256], None, "FULL_AND_PIECEWISE", 256),
    ([], None, "NONE", None),
    (None, 0, "NONE", None),
    (None, 257, "FULL_AND_PIECEWISE", 256),  # vLLM also lowers the field to 256; cupygraph keeps 257
    ([1, 2, 4, 15], None, "FULL_AND_PIECEWISE", 15),
    ([], None, "FULL_AND_PIECEWISE", ConfigError),
    (None, 0, "FULL_AND_PIECEWISE", ConfigError),
])
def test_vllm_capture_size_cases(capture_sizes, max_capture_size, mode, largest):
    fields = dict(mode=mode, max_num_reqs=128)
    if capture_sizes is not None:
        fields["capture_sizes"] = capture_sizes
    if max_capture_size is not None:
        fields["max_capture_size"] = max_capture_size
    if largest is ConfigError:
        with pytest.raises(ConfigError, match=r"field .(max_capture_size|capture_sizes)"):
            CUDAGraphConfig(**fields)
        return
    c = CUDAGraphConfig(**fields)
    assert c.largest_capture_size == largest
    if mode == "NONE":
        assert c.max_capture_size == 0  # vLLM: 0 under NONE; here the largest of [] or the 0 given
    elif max_capture_size is None:
        assert c.max_capture_size == largest


# -- token limits: the one check, on the real batch size (issue 12) --------------------------------


@pytest.mark.parametrize(
    "n, low, high, why",
    [
        (3, 4, None, "batch of 3 is below min_tokens_for_graph=4"),
        (4, 4, None, None),
        (12, 1, 12, None),
        (13, 1, 12, "batch of 13 is above max_tokens_for_graph=12"),
    ],
)
def test_outside_token_limits_names_the_limit(n, low, high, why):
    assert outside_token_limits(n, low, high) == why
