"""The ``h2`` package (python-hyper) as a conformance peer: the frames it builds, as a
client, our link server accepts; the frames our link client builds, h2 as a server
parses (it raises on any violation of RFC 9113)."""

import socket
import threading

import h2.config
import h2.connection
import h2.events
import numpy as np

from ipu_node.links import link_secret
from ipu_node.links.channel import LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.grpc_messages import grpc_prefix
from ipu_node.links.link_server import PUSH
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.links.wire import decode_chunk, encode_chunk, encode_header
from ipupod_proto import link_pb2


def _events(sock: socket.socket, conn: h2.connection.H2Connection):
    """h2's events for what arrives next, answering what it must."""
    data = sock.recv(1 << 16)
    events = conn.receive_data(data) if data else [None]
    sock.sendall(conn.data_to_send())
    return events


def test_frames_the_h2_package_builds_are_accepted_by_our_server():
    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox)
    server.start()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True,
                                                                 header_encoding="utf-8"))
    payload = np.arange(50_000, dtype=np.float32)  # beyond one frame of 16 KiB
    message = encode_chunk(encode_header("h2", 0, 1, 0, 0, 1, 0, payload.nbytes),
                           memoryview(payload).cast("B"))
    body = grpc_prefix(len(message)) + message
    try:
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        while not any(isinstance(e, h2.events.RemoteSettingsChanged)
                      for e in _events(sock, conn)):
            pass
        conn.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", PUSH),
                              (":authority", "localhost"), ("content-type", "application/grpc"),
                              ("te", "trailers"), link_secret.bearer(link_secret.local_secret())])
        at = 0
        while at < len(body):  # within the windows the server gives, as a peer must
            room = min(conn.local_flow_control_window(1), conn.max_outbound_frame_size)
            if room == 0:  # the server's WINDOW_UPDATE may still be on its way
                assert _events(sock, conn) != [None], "the server closed the connection"
                continue
            conn.send_data(1, body[at:at + room])
            sock.sendall(conn.data_to_send())
            at += room
        conn.end_stream(1)
        sock.sendall(conn.data_to_send())
        reply, trailers, ended = b"", {}, False
        while not ended:
            for event in _events(sock, conn):
                assert event is not None, "the server closed the connection"
                if isinstance(event, h2.events.DataReceived):
                    reply += event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(event, h2.events.TrailersReceived):
                    trailers = dict(event.headers)
                ended = ended or isinstance(event, h2.events.StreamEnded)
        assert trailers["grpc-status"] == "0"
        assert link_pb2.PushReply.FromString(reply[5:]).bytes == payload.nbytes
        (_, data), = mailbox.take(TransferKey("h2", 0, 1, 0), 5, "IPU 0")
        np.testing.assert_array_equal(np.frombuffer(data, np.float32), payload)
    finally:
        sock.close()
        server.stop()


def _h2_server(listener: socket.socket, requests: list, errors: list) -> None:
    """Serve one connection with h2 (its errors go to ``errors``)."""
    try:
        _h2_serve(listener, requests)
    except Exception as error:
        errors.append(error)


def _h2_serve(listener: socket.socket, requests: list) -> None:
    """Answer each Push with a PushReply of its payload bytes."""
    sock, _ = listener.accept()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False,
                                                                 header_encoding="utf-8"))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    bodies: dict[int, bytes] = {}
    with sock:
        while (data := sock.recv(1 << 16)):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    requests.append(dict(event.headers))
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    chunk = decode_chunk(bodies[event.stream_id][5:])[1]
                    reply = link_pb2.PushReply(bytes=len(chunk), chunks=1).SerializeToString()
                    conn.send_headers(event.stream_id, [(":status", "200"),
                                                        ("content-type", "application/grpc")])
                    conn.send_data(event.stream_id, grpc_prefix(len(reply)) + reply)
                    conn.send_headers(event.stream_id, [("grpc-status", "0")], end_stream=True)
            sock.sendall(conn.data_to_send())


def test_frames_our_client_builds_are_parsed_by_the_h2_package():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    requests: list = []
    errors: list = []
    serving = threading.Thread(target=_h2_server, args=(listener, requests, errors), daemon=True)
    serving.start()
    client = LinkClient("h2", f"127.0.0.1:{listener.getsockname()[1]}", secret="s3")
    try:
        payload = np.arange(100_000, dtype=np.float32)  # beyond h2's first windows
        assert client.push(encode_transfers("c", 0, 0, [Transfer(0, 0, 1, payload)]),
                           10) == payload.nbytes
        assert requests[0][":path"] == PUSH
        assert requests[0]["authorization"] == "Bearer s3"
    finally:
        client.close()
        serving.join(10)
        listener.close()
    assert not serving.is_alive() and errors == []  # h2 parsed everything, then our close
