"""A live link server under generated frame sequences (hypothesis): after each, it still
answers a legitimate Ping and Push, its connection threads have come back, and its
process's resident memory stayed within a bound."""

import os
import socket
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipu_node.links.channel import LinkServer
from ipu_node.links.frames import PREFACE, SETTINGS, frame_header
from ipu_node.links.wire import decode_chunk
from tests.link_peer import answers, wait_until

RSS_BOUND_BYTES = 256 << 20  # growth allowed over the whole run


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def fuzzed():
    def receive(messages):  # count the payload bytes, keep nothing
        return sum(len(decode_chunk(message)[1]) for message in messages), 0

    server = LinkServer("victim", receive)
    server.start()
    assert answers(server)
    assert wait_until(lambda: server.connections == 0)
    yield server, threading.active_count(), resident_bytes()
    server.stop()


FRAME = st.tuples(st.integers(0, 12), st.integers(0, 255), st.integers(0, 5),
                  st.binary(max_size=48), st.one_of(st.none(), st.integers(0, 1 << 20)))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(handshake=st.booleans(), frames=st.lists(FRAME, max_size=8))
def test_generated_frames_leave_the_server_answering_with_its_threads_and_memory(
        fuzzed, handshake, frames):
    server, threads, rss = fuzzed
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    try:
        data = PREFACE + frame_header(0, SETTINGS, 0, 0) if handshake else b""
        for kind, flags, stream, payload, declared in frames:
            length = len(payload) if declared is None else declared
            data += frame_header(length, kind, flags, stream) + payload
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server closed first
    finally:
        sock.close()
    assert answers(server)
    assert wait_until(lambda: server.connections == 0)
    assert wait_until(lambda: threading.active_count() <= threads)
    assert resident_bytes() - rss < RSS_BOUND_BYTES
