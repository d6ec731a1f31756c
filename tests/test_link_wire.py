"""The hand-written Chunk codec speaks standard protobuf, both ways, and the link layer
moves chunked payloads between two real gRPC endpoints on loopback."""

import numpy as np
import pytest

from ipu_node.errors import DeviceError, LinkTimeout
from ipu_node.link import (CHUNK_BYTES, LinkClient, LinkServer, Mailbox, Transfer,
                           TransferKey, encode_transfers)
from ipu_node.wire import decode_chunk, encode_chunk, encode_header
from ipupod_proto import link_pb2

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
        LinkClient("receiver", server.address).ping(deadline_s=1)
