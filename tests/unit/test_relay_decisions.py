"""When a graph family relays its static buffers and outputs (``backends/relay.py``): the decision both
backends share, learned from the first capture and given up for good once a function writes an argument."""

from __future__ import annotations

from cupygraph.backends.relay import NO_RELAY, RELAY_MAX_BYTES, FamilyRelays, RelayRequest, relayable

ASKED = RelayRequest((0, 2), outputs=True)


def test_a_family_relays_once_a_capture_copied_for_a_reason_relays_fix():
    relays = FamilyRelays()
    assert not relays.first(ASKED)  # nothing learned yet: the first capture goes without relays
    assert not relays.retry(ASKED, ["strides", "alignment"])  # copies no relay avoids
    assert relays.decided is None
    assert relays.retry(ASKED, ["strides", "library_state"])
    assert relays.first(ASKED) and relays.decided is True  # the family's later captures relay at once


def test_nothing_asked_nothing_relayed():
    relays = FamilyRelays()
    assert not NO_RELAY and not relays.retry(NO_RELAY, ["library_state"])
    assert RelayRequest(outputs=True) and RelayRequest((1,))
    relays.decided = True
    assert not relays.first(NO_RELAY)


def test_a_function_writing_an_argument_never_relays_again():
    relays = FamilyRelays()
    assert relays.retry(ASKED, ["copy_node"])
    relays.give_up()
    assert not relays.first(ASKED) and not relays.retry(ASKED, ["library_state"])
    assert relays.decided is False


def test_the_relay_limit():
    assert not relayable(0) and relayable(1) and relayable(RELAY_MAX_BYTES) and not relayable(RELAY_MAX_BYTES + 1)
