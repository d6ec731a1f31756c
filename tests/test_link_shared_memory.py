"""Chunks between devices on one machine go through shared-memory slots: the payloads
arrive whole, slots come back only after landing (back-pressure, bounded), references a
sender could not have made are refused while the server keeps serving, no file is left in
/dev/shm, and TCP, TLS and the switch keep the socket path with the same results."""

import mmap
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from gcl.collectives import COLLECTIVES
from gcl.reference import expected
from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.channel import CHUNK_BYTES, LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.links.shared_slots import (
    ENV_SWITCH,
    SHM_FOLDER,
    SenderSlots,
    sweep_stale_segments,
    wanted,
)
from ipu_node.links.wire import announcement, encode_header, slot_reference
from ipu_node.pod import EmulatedPod
from tests.announced_segment import announced_segment


def our_segments() -> set[str]:
    return {p.name for p in SHM_FOLDER.glob(f"ipupod-slots-{os.getpid()}-*")}


def mapped_segments(pid: int, kind: str = "ipupod-slots-") -> int:
    """How many shared-memory segments of links (or of ``kind``) process ``pid`` maps."""
    return sum(kind in line for line in Path(f"/proc/{pid}/maps").read_text().splitlines())


@pytest.fixture
def link():
    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox, limits=LinkLimits(shared_memory_slots=2))
    server.start()
    client = LinkClient("receiver", server.link_address, limits=LinkLimits(shared_memory_slots=2))
    yield mailbox, server, client
    client.close()
    server.stop()


def land_in_thread(mailbox, key, into: dict) -> threading.Thread:
    """Land ``key``'s chunks as the executor does: each read before the next is asked for."""

    def land():
        pieces = [(at, bytes(data), isinstance(getattr(data, "obj", None), mmap.mmap))
                  for at, data in mailbox.chunks(key, 20, "IPU 1")]
        into["data"] = b"".join(data for _, data, _ in sorted(pieces))
        into["in_slots"] = [shared for _, _, shared in pieces]

    thread = threading.Thread(target=land)
    thread.start()
    return thread


def test_more_chunks_than_slots_arrive_whole_through_shared_memory(link):
    mailbox, server, client = link
    payload = np.arange((5 * CHUNK_BYTES + 12) // 4, dtype=np.float32)  # 6 chunks, 2 slots
    got: dict = {}
    thread = land_in_thread(mailbox, TransferKey("c1", 0, 0, 3), got)
    assert client.push(encode_transfers("c1", 0, 0, [Transfer(3, 1, 2, payload)]), 20) \
        == payload.nbytes
    thread.join()
    assert got["data"] == payload.tobytes()
    assert got["in_slots"] == [True] * 5 + [False]  # a small tail goes inline
    assert server.slots is not None and server.slots.segments == 1
    assert not our_segments()  # mapped by both, unlinked at once


def test_a_sender_waits_for_slots_until_its_deadline_and_says_so(link):
    mailbox, server, client = link
    payload = np.zeros(3 * CHUNK_BYTES // 4, dtype=np.float32)  # nobody lands: 2 slots fill
    with pytest.raises(LinkTimeout, match="link to receiver: none of its 2 shared-memory slots"):
        client.push(encode_transfers("stuck", 0, 0, [Transfer(0, 1, 2, payload)]), 1)
    mailbox.abort("stuck", "test over")  # its held slots go back
    got: dict = {}
    thread = land_in_thread(mailbox, TransferKey("next", 0, 0, 0), got)
    client.push(encode_transfers("next", 0, 0, [Transfer(0, 1, 2, payload + 1)]), 20)
    thread.join()
    assert got["data"] == (payload + 1).tobytes()
    assert server.slots.segments == 1  # a new segment, the one given up forgotten


def test_taken_chunks_are_copied_out_of_their_slots(link):
    mailbox, _, client = link
    payload = np.arange(CHUNK_BYTES // 4, dtype=np.int32)
    client.push(encode_transfers("t", 0, 0, [Transfer(0, 1, 2, payload)]), 20)
    (_, data), = mailbox.take(TransferKey("t", 0, 0, 0), 5, "IPU 1")
    client.push(encode_transfers("t", 0, 1, [Transfer(0, 1, 2, -payload)]), 20)  # reuses slots
    client.push(encode_transfers("t", 0, 2, [Transfer(0, 1, 2, -payload)]), 20)
    assert isinstance(data, bytes) and data == payload.tobytes()


@pytest.fixture
def raw_link():
    """A server with shared memory, a client that sends messages as given, and a segment
    announced to the server with slot 0 claimed by the sender."""
    with announced_segment() as (client, slots, mailbox):
        assert slots.claim(0) == 0
        slots.write(0, memoryview(b"x" * 100))
        yield client, slots, mailbox


HEADER = encode_header("h", 0, 0, 0, 1, 2, 0, 100)


@pytest.mark.parametrize("messages, complaint", [
    (lambda name: [slot_reference(HEADER, "ipupod-slots-1-x-0123456789abcdef", 0, 100)],
     "unknown shared-memory segment"),
    (lambda name: [slot_reference(HEADER, name, 2, 100)], "outside segment"),
    (lambda name: [slot_reference(HEADER, name, 0, (1 << 16) + 1)], "outside segment"),
    (lambda name: [slot_reference(HEADER, name, 0, 0)], "outside segment"),
    (lambda name: [slot_reference(HEADER, name, 1, 100)], "slot 1 .* is not in flight"),
    (lambda name: [slot_reference(HEADER, name, 0, 100)] * 2, "slot 0 .* referred to twice"),
    (lambda name: [announcement("../../etc/passwd", 2, 1 << 16)], "not a shared-memory segm"),
    (lambda name: [announcement(name, 2, 1 << 16)], "cannot be opened"),  # unlinked: once only
    (lambda name: [announcement(name, 99, 1 << 16)], "a segment of 99 slots"),
])
def test_a_reference_the_sender_could_not_have_made_is_refused_and_the_server_serves_on(
        raw_link, messages, complaint):
    client, slots, mailbox = raw_link
    with pytest.raises(DeviceError, match=f"malformed chunk arrived on a link: .*{complaint}"):
        client.push(messages(slots.name), 10)
    assert client.ping() == "receiver"
    mailbox.discard("h")  # what a refused stream had filed is dropped, its slot handed back
    slot = slots.claim(0)
    slots.write(slot, memoryview(b"y" * 100))
    client.push([slot_reference(HEADER, slots.name, slot, 100)], 10)
    (_, data), = mailbox.take(TransferKey("h", 0, 0, 0), 5, "IPU 1")
    assert data == b"y" * 100


def test_a_relaying_host_gets_chunks_inline_and_tcp_links_never_use_shared_memory():
    received: list[bytes] = []

    def relay(messages):
        from ipu_node.links.wire import decode_chunk
        for message in messages:
            received.append(bytes(decode_chunk(message)[1]))
        return sum(map(len, received)), len(received)

    host = LinkServer("host", relay)
    host.start()
    mailbox = Mailbox()
    card = LinkServer("card", mailbox)
    card.start()
    payload = np.arange(CHUNK_BYTES // 4, dtype=np.float32)
    to_host = LinkClient("host", host.link_address)
    over_tcp = LinkClient("card", card.address)
    try:
        assert to_host.push(encode_transfers("r", 0, 0, [Transfer(0, 1, 2, payload)]), 10) \
            == payload.nbytes
        assert received == [payload.tobytes()]
        over_tcp.push(encode_transfers("r", 0, 0, [Transfer(0, 1, 2, payload)]), 10)
        (_, data), = mailbox.take(TransferKey("r", 0, 0, 0), 5, "IPU 1")
        assert bytes(data) == payload.tobytes() and card.slots.segments == 0
    finally:
        to_host.close()
        over_tcp.close()
        host.stop()
        card.stop()
    assert not our_segments()


def test_references_and_announcements_are_protobuf_chunk_fields():
    from ipupod_proto import link_pb2

    reference = link_pb2.Chunk.FromString(slot_reference(HEADER, "seg", 3, 99))
    assert (reference.collective, reference.slot_segment, reference.slot,
            reference.slot_length) == ("h", "seg", 3, 99)
    announced = link_pb2.Chunk.FromString(announcement("seg", 8, 4 << 20, "old"))
    assert (announced.slot_count, announced.slot_bytes, announced.slot_retired) == (8, 4 << 20,
                                                                                    "old")


def test_the_path_applies_to_unix_sockets_without_tls_unless_switched_off(monkeypatch):
    assert wanted("unix:/tmp/x.sock", False, 8)
    assert not wanted("unix:/tmp/x.sock", True, 8)  # TLS
    assert not wanted("127.0.0.1:5000", False, 8)  # TCP: maybe another machine
    assert not wanted("unix:/tmp/x.sock", False, 0)
    monkeypatch.setenv(ENV_SWITCH, "0")
    assert not wanted("unix:/tmp/x.sock", False, 8)


def test_a_receiver_forgets_the_segments_of_a_sender_that_is_gone():
    import subprocess
    import sys

    from ipu_node.links.shared_slots import ReceiverSlots, segment_bytes

    receiver = ReceiverSlots("card")
    sender = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        name = f"ipupod-slots-{sender.pid}-card-0123456789abcdef"
        descriptor = os.open(SHM_FOLDER / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.ftruncate(descriptor, segment_bytes(2, 1 << 16))
        os.close(descriptor)
        receiver.attach(name, 2, 1 << 16)
        assert receiver.segments == 1 and not (SHM_FOLDER / name).exists()
    finally:
        sender.kill()
        sender.wait()
    live = SenderSlots("card", 2, 1 << 16)
    live.create()
    receiver.attach(live.name, 2, 1 << 16)
    assert receiver.segments == 1  # the dead sender's is gone, the live one kept


def test_segments_of_processes_that_are_gone_are_swept(tmp_path):
    dead = 2 ** 22 + 12345  # above the largest pid a process can have
    stale = tmp_path / f"ipupod-slots-{dead}-card-0123456789abcdef"
    live = tmp_path / f"ipupod-slots-{os.getpid()}-card-0123456789abcdef"
    other = tmp_path / "ipupod-slots-notours"
    for path in (stale, live, other):
        path.write_bytes(b"")
    sweep_stale_segments(tmp_path)
    assert not stale.exists() and live.exists() and other.exists()


def test_a_slot_goes_back_to_its_sender_once_its_chunk_is_taken(raw_link):
    client, slots, mailbox = raw_link
    client.push([slot_reference(HEADER, slots.name, 0, 100)], 10)
    (_, data), = mailbox.take(TransferKey("h", 0, 0, 0), 5, "IPU 1")
    assert data == b"x" * 100 and slots.claim(0) == 0  # handed back once taken


# real collectives on real Ray, with and without the path

COUNT = 3 * CHUNK_BYTES // 4 // 16 + 5  # transfers of many 64 KiB+ chunks, odd sizes


@pytest.fixture(scope="module")
def pods(ray_session):
    before = set(os.listdir(SHM_FOLDER))
    launched = {True: EmulatedPod.launch("pod16"),
                False: EmulatedPod.launch("pod16", link_shared_memory=False)}
    yield launched
    for pod in launched.values():
        pod.shutdown()
    assert not {n for n in set(os.listdir(SHM_FOLDER)) - before if n.startswith("ipupod-slots-")}


def arrays_for(pod, collective, dtype, seed):
    n = pod.topology.ipu_count
    per = COUNT * (n if collective in ("reduce-scatter", "all-to-all") else 1)
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return [rng.integers(-1000, 1000, per).astype(dtype) for _ in range(n)]
    return [rng.standard_normal(per).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("collective", list(COLLECTIVES))
def test_collectives_through_shared_memory_equal_numpy_and_the_socket_path(pods, collective,
                                                                           dtype):
    arrays = arrays_for(pods[True], collective, dtype, seed=len(collective))
    shared = pods[True].collective(collective, arrays, root=2)
    socket = pods[False].collective(collective, arrays, root=2)
    for got, inline in zip(shared.results, socket.results):
        assert got.tobytes() == inline.tobytes()
    # the links metered the same bytes, and simulated time is the same
    assert shared.link_type_bytes == socket.link_type_bytes
    assert shared.sim_seconds == socket.sim_seconds
    if np.dtype(dtype).kind == "i":
        for got, want in zip(shared.results, expected(collective, arrays, "sum", 2)):
            np.testing.assert_array_equal(got, want)


def test_cards_map_segments_only_with_the_path_on(pods):
    pods[True].collective("allreduce", arrays_for(pods[True], "allreduce", np.float32, 0))
    pods[False].collective("allreduce", arrays_for(pods[False], "allreduce", np.float32, 0))
    assert all(mapped_segments(info["pid"]) for info in pods[True].infos)
    assert not any(mapped_segments(info["pid"]) for info in pods[False].infos)
    # switched off, collective buffers are private memory too: no peer maps them
    for pod in pods.values():
        pod.collective("allreduce", [np.ones(1 << 19, np.float32)] * 16)  # 2 MiB buffers
    assert all(mapped_segments(info["pid"], "/memfd:ipupod-buffer-")
               for info in pods[True].infos)
    assert not any(mapped_segments(info["pid"], "/memfd:ipupod-buffer-")
                   for info in pods[False].infos)
    np.testing.assert_array_equal(pods[True].link_bytes(), pods[False].link_bytes())


def test_link_limits_refuse_slots_out_of_range_and_a_wait_that_is_not_yes_or_no():
    from cluster.errors import UserError

    with pytest.raises(UserError, match="shared_memory_slots must be 0 .off. to 64, not 65"):
        LinkLimits(shared_memory_slots=65)
    with pytest.raises(UserError, match="shared_memory_waits must be true or false, not 1"):
        LinkLimits(shared_memory_waits=1)  # type: ignore[arg-type]
    assert not LinkLimits(shared_memory_waits=False).shared_memory_waits
