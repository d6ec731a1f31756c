"""A link server under a hostile peer on 127.0.0.1: every case of issue 13's list, each
written as raw frames at a real LinkServer. A violation of RFC 9113 gets GOAWAY with the
RFC's error code and a close; sizes, connections and time are bounded; the server keeps
answering legitimate calls."""

import struct
import threading
import tracemalloc

import numpy as np
import pytest

from ipu_node.device_errors import DeviceError
from ipu_node.links import frames as f
from ipu_node.links.channel import LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.link_server import PING, PUSH
from ipu_node.links.mailbox import Mailbox, TransferKey
from tests.link_peer import Peer, answers, push_data, unread_bytes, wait_until


@pytest.fixture
def server():
    served = LinkServer("victim", Mailbox())
    served.start()
    yield served
    served.stop()


def settings(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">HI", key, value) for key, value in pairs)


def window_past_the_top(peer: Peer) -> None:
    peer.send(f.WINDOW_UPDATE, 0, 0, struct.pack(">I", f.MAX_WINDOW))  # ours is 65535 already


def padded_data_beyond_its_frame(peer: Peer) -> None:
    peer.headers(1, PUSH)
    peer.send(f.DATA, f.PADDED, 1, bytes([200]) + b"\x00" * 9)


def continuation_on_another_stream(peer: Peer) -> None:
    peer.send(f.HEADERS, 0, 1, b"")  # no END_HEADERS: a CONTINUATION of stream 1 must follow
    peer.send(f.CONTINUATION, f.END_HEADERS, 3, b"")


VIOLATIONS = {  # case -> (what the peer writes, the RFC's error code)
    "window_update_of_zero": (
        lambda p: p.send(f.WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00"), f.PROTOCOL_ERROR),
    "window_update_past_2_31_minus_1": (window_past_the_top, f.FLOW_CONTROL_ERROR),
    "settings_max_frame_size_zero": (
        lambda p: p.send(f.SETTINGS, 0, 0, settings((f.MAX_FRAME_SIZE, 0))), f.PROTOCOL_ERROR),
    "settings_enable_push_two": (
        lambda p: p.send(f.SETTINGS, 0, 0, settings((f.ENABLE_PUSH, 2))), f.PROTOCOL_ERROR),
    "settings_window_past_2_31_minus_1": (
        lambda p: p.send(f.SETTINGS, 0, 0, settings((f.INITIAL_WINDOW_SIZE, 1 << 31))),
        f.FLOW_CONTROL_ERROR),
    "settings_of_five_bytes": (lambda p: p.send(f.SETTINGS, 0, 0, b"\x00" * 5),
                               f.FRAME_SIZE_ERROR),
    "ping_of_three_bytes": (lambda p: p.send(f.PING, 0, 0, b"abc"), f.FRAME_SIZE_ERROR),
    "ping_on_a_stream": (lambda p: p.send(f.PING, 0, 1, b"12345678"), f.PROTOCOL_ERROR),
    "padded_data_whose_pad_exceeds_the_frame": (padded_data_beyond_its_frame,
                                                f.PROTOCOL_ERROR),
    "padded_headers_with_an_empty_payload": (
        lambda p: p.send(f.HEADERS, f.PADDED | f.END_HEADERS, 1, b""), f.FRAME_SIZE_ERROR),
    "padded_headers_whose_pad_exceeds_the_frame": (
        lambda p: p.send(f.HEADERS, f.PADDED | f.END_HEADERS, 1, b"\x09abc"), f.PROTOCOL_ERROR),
    "data_on_stream_zero": (lambda p: p.send(f.DATA, 0, 0, b"x"), f.PROTOCOL_ERROR),
    "headers_on_an_even_stream": (lambda p: p.headers(2), f.PROTOCOL_ERROR),
    "continuation_without_headers": (
        lambda p: p.send(f.CONTINUATION, f.END_HEADERS, 1, b""), f.PROTOCOL_ERROR),
    "continuation_on_another_stream": (continuation_on_another_stream, f.PROTOCOL_ERROR),
    "push_promise_from_a_client": (lambda p: p.send(f.PUSH_PROMISE, f.END_HEADERS, 1,
                                                    b"\x00\x00\x00\x02"), f.PROTOCOL_ERROR),
    "rst_stream_of_three_bytes": (lambda p: p.send(f.RST_STREAM, 0, 1, b"abc"),
                                  f.FRAME_SIZE_ERROR),
    "goaway_of_four_bytes": (lambda p: p.send(f.GOAWAY, 0, 0, b"abcd"), f.FRAME_SIZE_ERROR),
    "a_frame_before_settings": (None, f.PROTOCOL_ERROR),
}


@pytest.mark.parametrize("case", sorted(VIOLATIONS))
def test_a_protocol_violation_gets_goaway_with_the_rfcs_code_then_a_close(server, case):
    write, code = VIOLATIONS[case]
    if write is None:  # the preface, then a PING where SETTINGS must come
        peer = Peer(server.port, handshake=False)
        peer.sock.sendall(f.PREFACE)
        peer.send(f.PING, 0, 0, b"12345678")
    else:
        peer = Peer(server.port)
        write(peer)
    try:
        assert peer.goaway_code() == code
        assert peer.closed()
    finally:
        peer.close()
    assert answers(server)


def test_a_frame_longer_than_advertised_is_a_frame_size_error():
    server = LinkServer("victim", Mailbox(), limits=LinkLimits(max_frame_bytes=1 << 14))
    server.start()
    peer = Peer(server.port)
    try:
        peer.send(0xFA, 0, 0, b"x" * 100, length=(1 << 14) + 1)
        assert peer.goaway_code() == f.FRAME_SIZE_ERROR
        assert answers(server)
    finally:
        peer.close()
        server.stop()


def test_frames_declaring_16_mib_and_sending_1_kib_allocate_nothing_of_it(server):
    tracemalloc.start()
    peers = [Peer(server.port) for _ in range(4)]
    try:
        for peer in peers[:2]:  # an unknown type (ignored, skipped in pieces)
            peer.send(0xFA, 0, 0, b"x" * 1024, length=(1 << 24) - 1)
        for peer in peers[2:]:  # a PING (its length is fixed: refused at once)
            peer.send(f.PING, 0, 0, b"x" * 1024, length=(1 << 24) - 1)
        assert all(peer.goaway_code() == f.FRAME_SIZE_ERROR for peer in peers[2:])
        # the others' threads are in their reads: the server has taken their 1 KiB
        assert wait_until(lambda: all(unread_bytes(server.port, peer) == 0
                                      for peer in peers[:2]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        for peer in peers:
            peer.close()
    assert peak < 4 << 20


def test_continuation_frames_beyond_the_header_limit_end_the_connection(server):
    peer = Peer(server.port)
    try:
        peer.send(f.HEADERS, 0, 1, b"\x00" * 1024)  # a header block that never ends
        for _ in range(64):  # 1 MiB of CONTINUATION: the limit is 16 KiB
            peer.send(f.CONTINUATION, 0, 1, b"\x00" * (16 << 10))
        assert peer.goaway_code() == f.ENHANCE_YOUR_CALM
        assert peer.closed()
    finally:
        peer.close()
    assert answers(server)


def test_a_grpc_message_of_4_gib_gets_resource_exhausted_and_the_connection_carries_on(server):
    peer = Peer(server.port)
    try:
        push_data(peer, 1, b"x" * 100, declared=(1 << 32) - 1)
        assert peer.grpc_status(1) == "8"
        peer.headers(3, PING)
        peer.send(f.DATA, f.END_STREAM, 3, struct.pack(">BI", 0, 0))
        assert peer.grpc_status(3) == "0"
    finally:
        peer.close()


def test_a_push_into_a_full_mailbox_is_refused_with_resource_exhausted():
    mailbox = Mailbox(LinkLimits(max_buffered_bytes=1 << 20))
    server = LinkServer("victim", mailbox)
    client = LinkClient("victim", server.start())
    try:
        payload = np.zeros(1 << 19, dtype=np.float32)  # 2 MiB, never taken
        with pytest.raises(DeviceError, match="gRPC status 8 .*limit of 1,048,576"):
            client.push(encode_transfers("never", 0, 0, [Transfer(0, 0, 1, payload)]), 10)
        assert mailbox.buffered_bytes <= 1 << 20
    finally:
        client.close()
        server.stop()


def test_chunks_of_a_collective_that_never_runs_are_dropped_after_the_deadline_and_counted():
    now = [0.0]
    mailbox = Mailbox(LinkLimits(stale_chunks_seconds=30.0), clock=lambda: now[0])
    for step in range(3):
        mailbox.deposit(TransferKey("orphan", 0, step, 0), 0, 8 << 20, b"x" * 1024)
    now[0] = 10.0
    mailbox.sweep()
    assert (mailbox.dropped_chunks, mailbox.buffered_bytes) == (0, 3 * 1024)
    now[0] = 31.0
    mailbox.sweep()
    assert (mailbox.dropped_chunks, mailbox.buffered_bytes) == (3, 0)
    mailbox.deposit(TransferKey("running", 0, 0, 0), 0, 4, b"abcd")
    now[0] = 100.0  # nobody waited, but it is taken now: a wait keeps it alive
    assert mailbox.take(TransferKey("running", 0, 0, 0), 1, "IPU 0") == [(0, b"abcd")]


def test_connections_that_go_quiet_in_the_handshake_are_closed_within_seconds():
    server = LinkServer("victim", Mailbox(), limits=LinkLimits(handshake_timeout_seconds=1.0))
    server.start()
    threads = threading.active_count()
    peers = [Peer(server.port, handshake=False) for _ in range(20)]
    try:
        for peer in peers:
            peer.sock.sendall(f.PREFACE[:5])  # 5 bytes, then nothing
        assert all(peer.closed(within_seconds=10) for peer in peers)
        assert wait_until(lambda: server.connections == 0)
        assert wait_until(lambda: threading.active_count() <= threads)
        assert answers(server)
    finally:
        for peer in peers:
            peer.close()
        server.stop()


def test_an_idle_connection_is_closed_after_the_idle_timeout():
    server = LinkServer("victim", Mailbox(),
                        limits=LinkLimits(idle_timeout_seconds=1.0, client_reuse_seconds=0.5))
    server.start()
    peer = Peer(server.port)
    try:
        assert peer.closed(within_seconds=10)
        assert wait_until(lambda: server.connections == 0)
    finally:
        peer.close()
        server.stop()


def test_connections_beyond_the_cap_get_goaway_and_are_closed():
    server = LinkServer("victim", Mailbox(), limits=LinkLimits(max_connections=4))
    server.start()
    threads = threading.active_count()
    held = [Peer(server.port) for _ in range(4)]
    try:
        assert wait_until(lambda: server.connections == 4)
        extra = [Peer(server.port) for _ in range(6)]
        assert all(peer.goaway_code() == f.ENHANCE_YOUR_CALM for peer in extra)
        assert server.connections == 4 and threading.active_count() <= threads + 4
        for peer in [*held, *extra]:
            peer.close()
        assert wait_until(lambda: server.connections == 0)
        assert answers(server)
    finally:
        server.stop()


def test_unknown_frame_types_are_ignored_and_the_connection_carries_on(server):
    peer = Peer(server.port)
    try:
        peer.send(0xFA, 0xFF, 7, b"whatever this is")
        peer.send(f.PRIORITY, 0, 1, b"\x00\x00\x00\x00\x10")
        peer.headers(1, PING)
        peer.send(f.DATA, f.END_STREAM, 1, struct.pack(">BI", 0, 0))
        assert peer.grpc_status(1) == "0"
    finally:
        peer.close()
