"""Which words of a kernel parameter may hold device addresses: the audit and zero-copy read CuPy's
structs the same way (``cupy_audit.pointer_offsets``)."""

from __future__ import annotations

import struct

from cupygraph.backends.guards.cupy_audit import pointer_offsets

GARBAGE = 0x7F00_1234_5000  # what an uninitialised word can hold: an old device address


def test_carray_gives_only_its_data_pointer():
    # CArray<float, 2>: pointer, size, shape[2], strides[2]
    data = struct.pack("<6q", 0x7F00_0000_0000, 12, 3, 4, 16, 4)
    assert pointer_offsets(data, 0) == (0,)


def test_cindexer_gives_no_pointer_even_when_an_index_word_looks_like_one():
    # CIndexer<2>: size, shape[2], index[2] (left uninitialised by CuPy)
    data = struct.pack("<5q", 12, 3, 4, GARBAGE, 0)
    assert pointer_offsets(data, 0) == ()


def test_anything_else_gives_every_aligned_word():
    raw = struct.pack("<2Q", GARBAGE, 7)  # two words that are no CuPy struct: both may be pointers
    assert pointer_offsets(raw, 0) == (0, 8)
    assert pointer_offsets(struct.pack("<Q", GARBAGE), 0) == (0,)  # a bare pointer
    assert pointer_offsets(b"\0" * 12, 4) == (4,)  # at offset 4, the first aligned word starts 4 bytes in
    assert pointer_offsets(b"\0" * 4, 0) == ()  # a scalar too short to hold an address
