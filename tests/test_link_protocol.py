"""The links' HTTP/2 state machine without a socket: two ``H2Protocol``s, a client and a
server, handed each other's bytes in memory; and the flow-control windows on their own."""

import numpy as np
import pytest

from ipu_node.links import events as ev
from ipu_node.links.frames import (
    PREFACE,
    ConnectionViolation,
    ErrorCode,
    FrameType,
    frame_header,
)
from ipu_node.links.protocol import H2Protocol
from ipu_node.links.windows import ReceiveWindow, SendWindows

CALL = [(":method", "POST"), (":scheme", "http"), (":path", "/ipupod.link.v1.Link/Ping"),
        (":authority", "localhost"), ("content-type", "application/grpc")]


def exchange(client: H2Protocol, server: H2Protocol) -> tuple[list, list]:
    """Hand each side the other's bytes until both are quiet: (client's, server's) events."""
    seen: tuple[list, list] = ([], [])
    while client.pending_output or server.pending_output:
        seen[1].extend(server.receive_data(b"".join(map(bytes, client.data_to_send()))))
        seen[0].extend(client.receive_data(b"".join(map(bytes, server.data_to_send()))))
    return seen


def connected() -> tuple[H2Protocol, H2Protocol]:
    client, server = H2Protocol(), H2Protocol(server=True)
    client.initiate_connection()
    opened = [ev.WindowUpdated(0)]  # each opens its connection window to 2^31-1
    assert exchange(client, server) == (opened, opened)
    assert client.settings_seen and server.settings_seen
    return client, server


def test_a_call_and_its_answer_cross_as_events_without_a_socket():
    client, server = connected()
    payload = np.arange(40_000, dtype=np.float32)  # beyond the default frame of 16 KiB
    client.send_headers(1, CALL, end=False)
    assert client.send_message(1, (b"head", payload)) == []
    client.end_data(1)
    _, request = exchange(client, server)
    assert [type(event) for event in request] == [ev.HeadersReceived, ev.MessageReceived,
                                                  ev.StreamEnded]
    assert request[0].headers[":path"] == "/ipupod.link.v1.Link/Ping"
    assert bytes(request[1].message) == b"head" + payload.tobytes()
    server.send_headers(1, [(":status", "200")], end=False)
    server.send_message(1, (b"reply",))
    server.send_headers(1, [("grpc-status", "0")], end=True)
    answer, _ = exchange(client, server)
    assert [type(event) for event in answer] == [ev.HeadersReceived, ev.MessageReceived,
                                                 ev.HeadersReceived, ev.StreamEnded]
    assert bytes(answer[1].message) == b"reply" and answer[2].headers == {"grpc-status": "0"}
    assert client.current == 0 and server.current == 0  # the call is over on both sides


def test_a_second_stream_while_one_is_in_progress_is_refused():
    client, server = connected()
    client.send_headers(1, CALL, end=False)
    exchange(client, server)
    client.send_headers(3, CALL, end=False)  # one at a time: the server refuses stream 3
    assert server.receive_data(b"".join(map(bytes, client.data_to_send()))) == []
    assert server.current == 1
    refusal = (frame_header(4, FrameType.RST_STREAM, 0, 3)
               + int(ErrorCode.REFUSED_STREAM).to_bytes(4, "big"))
    assert b"".join(map(bytes, server.data_to_send())) == refusal


def test_a_frame_before_settings_raises_the_rfcs_error_code():
    server = H2Protocol(server=True)
    with pytest.raises(ConnectionViolation) as violation:
        server.receive_data(PREFACE + frame_header(8, FrameType.PING, 0, 0) + b"12345678")
    assert violation.value.code == ErrorCode.PROTOCOL_ERROR


def test_send_windows_follow_credit_and_the_peers_initial_window():
    windows = SendWindows()
    windows.open(1)
    windows.spend(1, 65_535)
    assert windows.room(1) == 0
    windows.credit(0, (1000).to_bytes(4, "big"))
    windows.credit(1, (10).to_bytes(4, "big"))
    assert windows.room(1) == 10
    windows.set_initial(65_535 + 90)  # open streams move by the difference
    assert windows.room(1) == 100
    windows.credit(1, ((1 << 31) - 1 - 100).to_bytes(4, "big"))  # the stream's window: full
    with pytest.raises(ConnectionViolation) as violation:
        windows.set_initial(65_535 + 91)  # would take it past 2^31-1
    assert violation.value.code == ErrorCode.FLOW_CONTROL_ERROR


def test_a_receive_window_gives_credit_back_in_large_steps_and_refuses_more_than_it_gave():
    window = ReceiveWindow()
    assert window.received(1 << 20, on_stream=True) == (0, 0)
    assert window.received(63 << 20, on_stream=True) == (64 << 20, 64 << 20)
    with pytest.raises(ConnectionViolation) as violation:
        window.received(1 << 31, on_stream=False)
    assert violation.value.code == ErrorCode.FLOW_CONTROL_ERROR
