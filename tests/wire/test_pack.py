"""hub.wire.codec.pack reuses one msgpack packer per OS thread: its bytes are packb's, after a
value it refused too, and from several threads at once."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hub.wire.codec import pack

_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_pack_writes_what_packb_writes(value: Any) -> None:
    assert pack(value) == msgpack.packb(value, use_bin_type=True)


@pytest.mark.parametrize("refused", [{"a": {1, 2}}, {"a": "\ud800"}, {"a": 2**65}])
def test_a_refused_value_leaves_the_packer_ready(refused: Any) -> None:
    with pytest.raises((TypeError, UnicodeEncodeError, OverflowError)):
        pack({"before": [1, 2, 3], "bad": refused})
    assert pack({"b": 1}) == msgpack.packb({"b": 1})


def test_packing_an_event_allocates_no_buffer_per_call() -> None:
    event = {"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": 1}]}
    pack(event)  # this thread's packer, made
    tracemalloc.start()
    try:
        for _ in range(100):
            pack(event)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4096, peak  # packb: 256 KiB per call


def test_threads_pack_at_once_without_mixing_their_bytes() -> None:
    wrong: list[Any] = []

    def work(n: int) -> None:
        for i in range(2000):
            value = {"thread": n, "i": i, "pad": "x" * (n * 7 + i % 50)}
            if pack(value) != msgpack.packb(value, use_bin_type=True):
                wrong.append(value)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
