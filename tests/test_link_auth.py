"""Every link call carries the POD's link secret: without it, or with a wrong one, a peer
gets UNAUTHENTICATED and the connection closes before any chunk is accepted; the secret
is never shown. And a stale Unix socket that cannot be removed does not stop a server."""

import os

import numpy as np
import pytest

from ipu_node.device_errors import DeviceError
from ipu_node.links import frames as f
from ipu_node.links.channel import LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.link_secret import new_secret
from ipu_node.links.link_server import PUSH
from ipu_node.links.mailbox import Mailbox
from tests.link_peer import Peer, push_data


def test_a_grpcio_client_without_the_secret_is_refused_unauthenticated():
    import grpc

    from ipupod_proto import link_pb2, link_pb2_grpc

    server = LinkServer("guarded", Mailbox(), secret=new_secret())
    channel = grpc.insecure_channel(server.start())
    try:
        with pytest.raises(grpc.RpcError) as refused:
            link_pb2_grpc.LinkStub(channel).Ping(link_pb2.PingRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()
        server.stop()


def test_a_wrong_secret_is_refused_before_any_chunk_is_accepted():
    mailbox = Mailbox()
    server = LinkServer("guarded", mailbox, secret=new_secret())
    client = LinkClient("guarded", server.start(), secret=new_secret())
    try:
        payload = np.ones(1000, dtype=np.float32)
        with pytest.raises(DeviceError, match="link to guarded"):
            client.push(encode_transfers("c", 0, 0, [Transfer(0, 0, 1, payload)]), 10)
        assert mailbox.bytes_received == 0 and mailbox.buffered_bytes == 0
    finally:
        client.close()
        server.stop()


def test_a_call_without_the_secret_gets_unauthenticated_then_goaway_and_a_close():
    mailbox = Mailbox()
    server = LinkServer("guarded", mailbox, secret=new_secret())
    server.start()
    peer = Peer(server.port)
    try:
        peer.headers(1, PUSH, secret="")
        push_data_only = b"\x00" + (10).to_bytes(4, "big") + b"0123456789"
        peer.send(f.DATA, f.END_STREAM, 1, push_data_only)
        assert peer.grpc_status(1) == "16"
        assert peer.goaway_code() == f.NO_ERROR
        assert peer.closed()
        assert mailbox.bytes_received == 0
    finally:
        peer.close()
        server.stop()


def test_the_right_secret_is_let_in():
    secret = new_secret()
    server = LinkServer("guarded", Mailbox(), secret=secret)
    client = LinkClient("guarded", server.start(), secret=secret)
    try:
        assert client.ping() == "guarded"
    finally:
        client.close()
        server.stop()


def test_the_secret_is_not_in_what_the_link_parts_print():
    from ipu_node.launcher import Launch

    secret = new_secret()
    server = LinkServer("guarded", Mailbox(), secret=secret)
    client = LinkClient("guarded", server.address, secret=secret)
    launch = Launch("pod", {}, [], [], "127.0.0.1", 1.0, 0, secret)
    try:
        shown = " ".join([repr(server), repr(client), repr(launch)])
        assert secret not in shown
    finally:
        server.stop()


def test_a_stale_unix_socket_that_cannot_be_removed_does_not_stop_a_server(tmp_path,
                                                                           monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / "ipupod-link-99999999-1.sock"  # its process is gone
    stale.mkdir()  # and unlink cannot remove it (as with another user's file)
    (tmp_path / f"ipupod-link-{os.getpid()}-1.sock").mkdir()
    server = LinkServer("survivor", Mailbox())
    client = LinkClient("survivor", server.start() and server.link_address)
    try:
        assert client.ping() == "survivor"
        assert stale.exists()
    finally:
        client.close()
        server.stop()


def test_a_raw_push_with_the_secret_is_answered_ok():
    server = LinkServer("guarded", Mailbox())
    server.start()
    peer = Peer(server.port)
    try:
        push_data(peer, 1, b"")
        assert peer.grpc_status(1) == "0"
    finally:
        peer.close()
        server.stop()
