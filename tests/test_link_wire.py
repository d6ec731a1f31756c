"""The hand-written Chunk codec speaks standard protobuf, both ways; the link layer moves
chunked payloads between two real gRPC endpoints on loopback, and interoperates with
grpcio's clients and servers."""

import numpy as np
import pytest

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.channel import CHUNK_BYTES, LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.links.wire import decode_chunk, encode_chunk, encode_header
from ipupod_proto import link_pb2

SECRET = "a-test-link-secret"
AUTH = [("authorization", f"Bearer {SECRET}")]  # what a grpcio client adds to each call
FIELDS = dict(collective="pod-c7", phase=3, step=300, transfer=2, src_ipu=17, dst_ipu=0,
              offset=5 << 20, total=9 << 20)


def test_our_encoding_parses_as_a_protobuf_chunk():
    message = encode_chunk(encode_header(**FIELDS), memoryview(b"payload"))
    parsed = link_pb2.Chunk.FromString(message)
    assert {k: getattr(parsed, k) for k in FIELDS} == FIELDS
    assert parsed.data == b"payload"


def test_a_protobuf_chunk_decodes_with_our_parser_whatever_the_field_order():
    message = link_pb2.Chunk(data=b"\x00\x01", **FIELDS).SerializeToString()
    header, payload = decode_chunk(message)
    assert header._asdict() == FIELDS and bytes(payload) == b"\x00\x01"
    reordered = link_pb2.Chunk(data=b"xy").SerializeToString() + encode_header(**FIELDS)
    header, payload = decode_chunk(reordered)
    assert header.step == 300 and bytes(payload) == b"xy"


def test_a_malformed_chunk_is_a_device_error_not_a_crash():
    with pytest.raises(DeviceError, match="malformed chunk"):
        decode_chunk(b"\x0a\xff\xff")


def test_payloads_cross_a_real_grpc_link_in_chunks_and_arrive_whole():
    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox)
    client = LinkClient("receiver", server.start())
    try:
        assert client.ping() == "receiver"
        payload = np.arange((2 * CHUNK_BYTES + 12) // 4, dtype=np.float32)
        sent = client.push(encode_transfers("c1", 0, 4, [Transfer(7, 1, 2, payload)]), 10)
        assert sent == payload.nbytes
        pieces = mailbox.take(TransferKey("c1", 0, 4, 7), 5, "IPU 1")
        assert len(pieces) == 3
        received = np.concatenate([np.frombuffer(data, np.float32) for _, data in
                                   sorted(pieces, key=lambda p: p[0])])
        np.testing.assert_array_equal(received, payload)
        with pytest.raises(LinkTimeout, match="no data from IPU 9"):
            mailbox.take(TransferKey("c1", 0, 5, 7), 0.2, "IPU 9")
    finally:
        client.close()
        server.stop()
    with pytest.raises(DeviceError, match="link to receiver"):
        LinkClient("receiver", server.address).ping(deadline_seconds=1)


def test_grpcio_clients_push_and_ping_our_link_server():
    import grpc

    from ipupod_proto import link_pb2_grpc

    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox, secret=SECRET)
    channel = grpc.insecure_channel(server.start())
    try:
        stub = link_pb2_grpc.LinkStub(channel)
        assert stub.Ping(link_pb2.PingRequest(), timeout=5, metadata=AUTH).device == "receiver"
        data = np.arange(300_000, dtype=np.int32).tobytes()  # many HTTP/2 frames
        chunks = [link_pb2.Chunk(collective="c2", transfer=1, offset=o, total=len(data),
                                 data=data[o:o + 500_000]) for o in range(0, len(data), 500_000)]
        reply = stub.Push(iter(chunks), timeout=10, metadata=AUTH)
        assert (reply.bytes, reply.chunks) == (len(data), 3)
        pieces = mailbox.take(TransferKey("c2", 0, 0, 1), 5, "IPU 0")
        assert b"".join(bytes(p) for _, p in sorted(pieces, key=lambda p: p[0])) == data
    finally:
        channel.close()
        server.stop()


def test_our_link_client_pushes_to_a_grpcio_server():
    from concurrent import futures

    import grpc

    received = []

    def push(messages, context):
        received.extend(link_pb2.Chunk.FromString(m) for m in messages)
        return link_pb2.PushReply(bytes=sum(len(c.data) for c in received), chunks=len(received))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("ipupod.link.v1.Link", {
        "Push": grpc.stream_unary_rpc_method_handler(
            push, response_serializer=link_pb2.PushReply.SerializeToString)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = LinkClient("grpcio", f"127.0.0.1:{port}")
    try:
        payload = np.arange(200_000, dtype=np.float32)  # beyond grpcio's first windows
        sent = client.push(encode_transfers("c3", 1, 2, [Transfer(0, 4, 5, payload)]), 10)
        assert sent == payload.nbytes
        assert received[0].collective == "c3" and received[0].src_ipu == 4
        np.testing.assert_array_equal(np.frombuffer(received[0].data, np.float32), payload)
        with pytest.raises(DeviceError, match="gRPC status 12"):  # UNIMPLEMENTED
            client.ping(deadline_seconds=5)
    finally:
        client.close()
        server.stop(0)


def test_a_link_to_a_server_that_stopped_answering_times_out():
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()  # accepts connections, never speaks HTTP/2
    try:
        with pytest.raises(LinkTimeout, match="did not take the data in time"):
            LinkClient("mute", f"127.0.0.1:{silent.getsockname()[1]}").ping(deadline_seconds=0.5)
    finally:
        silent.close()


def test_concurrent_grpcio_calls_on_one_channel_all_get_through():
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from ipupod_proto import link_pb2_grpc

    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox, secret=SECRET)
    channel = grpc.insecure_channel(server.start())
    stub = link_pb2_grpc.LinkStub(channel)

    def push(transfer: int) -> int:
        chunk = link_pb2.Chunk(collective="c4", transfer=transfer, total=70_000,
                               data=bytes([transfer]) * 70_000)
        return stub.Push(iter([chunk]), timeout=20, metadata=AUTH).bytes

    try:
        with ThreadPoolExecutor(max_workers=6) as pool:
            assert list(pool.map(push, range(12))) == [70_000] * 12
        for transfer in range(12):
            (_, data), = mailbox.take(TransferKey("c4", 0, 0, transfer), 5, "IPU 0")
            assert bytes(data) == bytes([transfer]) * 70_000
    finally:
        channel.close()
        server.stop()


def test_the_link_benchmark_moves_every_byte_through_every_transport():
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "link_stream.py"
    shm = Path("/dev/shm")
    segments_before = set(shm.glob("ipupod-*")) if shm.is_dir() else set()
    run = subprocess.run([sys.executable, str(script), "--gib", "0.02", "--repeats", "1",
                          "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    for name in ("link", "link_shared", "grpcio", "unix_socket", "shared_memory"):
        assert report[name]["gb_per_second"] > 0 and len(report[name]["runs"]) == 1
    if shm.is_dir():  # the shared-memory rows' segments are gone afterwards
        assert set(shm.glob("ipupod-*")) <= segments_before  # the link's slots' too
    bad = subprocess.run([sys.executable, str(script), "--gib", "0"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--gib must be" in bad.stderr


def test_a_receiver_that_fails_answers_with_a_readable_grpc_status_and_keeps_serving():
    def receive(messages):
        for _ in messages:
            raise DeviceError("no room for 100% of this: ü")
        return 0, 0

    server = LinkServer("receiver", receive)
    client = LinkClient("receiver", server.start())
    try:
        payload = np.zeros(3 * CHUNK_BYTES // 4, dtype=np.float32)  # the rest goes unread
        with pytest.raises(DeviceError,
                           match="gRPC status 13 receiver: no room for 100% of this: ü"):
            client.push(encode_transfers("c5", 0, 0, [Transfer(0, 0, 1, payload)]), 10)
        assert client.ping() == "receiver"  # the same server, still answering
    finally:
        client.close()
        server.stop()


def test_a_slow_receiver_makes_a_push_time_out_within_its_whole_deadline():
    import socket
    import threading

    from ipu_node.links import h2

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    taken = [0]  # bytes the receiver read
    done = threading.Event()

    def trickle():  # speaks HTTP/2, then takes 256 KiB every 0.2 s: 13 s for 16 MiB
        sock, _ = listener.accept()
        connection = h2.Connection(sock, server=True)
        connection.handshake()
        while not done.wait(0.2):
            try:
                got = sock.recv(256 << 10)
            except OSError:
                return
            if not got:
                return
            taken[0] += len(got)

    threading.Thread(target=trickle, daemon=True).start()
    client = LinkClient("slow", f"127.0.0.1:{listener.getsockname()[1]}")
    payload = np.zeros(16 << 18, dtype=np.float32)  # 16 MiB
    try:
        with pytest.raises(LinkTimeout, match="link to slow"):
            client.push(encode_transfers("c6", 0, 0, [Transfer(0, 0, 1, payload)]), 1.0)
        # the deadline is the whole call's: a chunk's own would have let the trickle take
        # all 16 MiB; one second of it takes about 1.25 MiB (a slow machine, less), and
        # the sockets' buffers hold a few MiB more
        assert taken[0] < 12 << 20
    finally:
        done.set()
        client.close()
        listener.close()


def test_a_reset_of_a_finished_stream_is_old_news_and_the_connection_carries_on():
    import socket

    from ipu_node.links import h2, link_secret
    from ipu_node.links.frames import ErrorCode

    server = LinkServer("receiver", Mailbox())
    server.start()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    connection = h2.Connection(sock)
    connection.handshake()

    def ping(stream: int) -> dict:
        connection.send_headers(stream, [(":method", "POST"), (":scheme", "http"),
                                         (":path", "/ipupod.link.v1.Link/Ping"),
                                         ("content-type", "application/grpc"),
                                         link_secret.bearer(link_secret.local_secret())], end=False)
        connection.send_messages(stream, [b""], end=True)
        reply = [bytes(m) for m in connection.messages(stream)]
        return {"reply": reply, **connection.trailers}

    try:
        assert ping(1)["grpc-status"] == "0"
        connection.protocol.reset_stream(1, ErrorCode.CANCEL)  # too late; sent with stream 3
        answer = ping(3)
        assert answer["grpc-status"] == "0"
        assert link_pb2.PingReply.FromString(answer["reply"][0]).device == "receiver"
    finally:
        connection.close()
        server.stop()
