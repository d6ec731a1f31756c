"""Chunks between devices on one machine are read straight from the sender's collective
buffer: they arrive whole by reference, a push returns only once its ranges have landed
(so the sender never overwrites what its peer has yet to read), references the sender did
not put in flight are refused while the server serves on, freed buffers and those of dead
processes are unmapped, no file is left anywhere, and real collectives keep their results."""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import ray

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.channel import CHUNK_BYTES, LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.links.shared_buffers import REGISTRY, PeerBuffers, shared_empty
from ipu_node.links.shared_slots import SHM_FOLDER, TICKETS
from ipu_node.links.wire import (
    buffer_announcement,
    buffer_forgotten,
    buffer_reference,
    encode_header,
)
from ipu_node.pod import EmulatedPod
from tests.announced_segment import announced_segment

_MAPPED = re.compile(r"/memfd:ipupod-buffer-(\d+)-")


def mapped_buffers(pid: int) -> list[int]:
    """The makers (pids) of the shared buffers process ``pid`` maps, one per mapping."""
    return [int(m.group(1)) for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if (m := _MAPPED.search(line))]


@pytest.fixture
def link():
    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox)
    server.start()
    client = LinkClient("receiver", server.link_address)
    yield mailbox, server, client
    client.close()
    server.stop()


def landed(mailbox, key, into: dict) -> threading.Thread:
    """Land ``key``'s chunks as the executor does (each read before the next is asked
    for), in a thread; ``into`` gets the bytes and how many came by reference."""

    def land():
        pieces = [(at, bytes(data), getattr(data, "readonly", False))
                  for at, data in mailbox.chunks(key, 20, "IPU 1")]
        into["data"] = b"".join(data for _, data, _ in sorted(pieces))
        into["by_reference"] = sum(shared for _, _, shared in pieces)

    thread = threading.Thread(target=land)
    thread.start()
    return thread


def test_chunks_of_a_shared_buffer_arrive_whole_by_reference_without_a_copy(link):
    mailbox, server, client = link
    buffer = shared_empty(3 * CHUNK_BYTES // 4 + 100, np.float32)
    buffer[:] = np.arange(buffer.size)
    got: dict = {}
    thread = landed(mailbox, TransferKey("t", 0, 0, 0), got)
    sent = client.push(encode_transfers("t", 0, 0, [Transfer(0, 1, 2, buffer[5:])]), 20)
    thread.join()
    assert sent == buffer[5:].nbytes and got["data"] == buffer[5:].tobytes()
    assert got["by_reference"] == 3  # the three whole chunks; the 380-byte tail went inline
    assert len(server.slots.buffers) == 1


def test_a_private_array_still_goes_through_slots(link):
    mailbox, server, client = link
    payload = np.arange(CHUNK_BYTES // 4, dtype=np.float32)
    got: dict = {}
    thread = landed(mailbox, TransferKey("p", 0, 0, 0), got)
    client.push(encode_transfers("p", 0, 0, [Transfer(0, 1, 2, payload)]), 20)
    thread.join()
    assert got["data"] == payload.tobytes() and len(server.slots.buffers) == 0


def test_a_push_returns_only_once_its_ranges_landed_else_it_fails_at_its_deadline(link):
    mailbox, _, client = link
    buffer = shared_empty(CHUNK_BYTES // 4, np.float32)
    buffer[:] = 7
    with pytest.raises(LinkTimeout, match="did not land the chunks it reads from this device"):
        client.push(encode_transfers("w", 0, 0, [Transfer(0, 1, 2, buffer)]), 0.5)
    mailbox.abort("w", "given up")  # the receiver drops it: the ticket comes back
    got: dict = {}
    thread = landed(mailbox, TransferKey("w2", 0, 0, 0), got)
    client.push(encode_transfers("w2", 0, 0, [Transfer(0, 1, 2, buffer)]), 20)
    thread.join()
    assert got["data"] == buffer.tobytes() and got["by_reference"] == 1


def test_a_freed_buffer_is_unmapped_by_the_peer_on_the_next_push(link):
    mailbox, server, client = link
    for round_ in range(3):  # each round's buffer freed before the next one's push
        buffer = shared_empty(CHUNK_BYTES // 4, np.float32)
        buffer[:] = round_
        got: dict = {}
        thread = landed(mailbox, TransferKey(f"f{round_}", 0, 0, 0), got)
        client.push(encode_transfers(f"f{round_}", 0, 0, [Transfer(0, 1, 2, buffer)]), 20)
        thread.join()
        assert got["data"] == buffer.tobytes() and len(server.slots.buffers) == 1
        del buffer, thread


HEADER = encode_header("h", 0, 0, 0, 1, 2, 0, 100)


@pytest.fixture
def raw_link():
    """A server with shared memory, a client that sends messages as given, a link segment
    and a shared buffer announced to the server, ticket 0 in flight for its first 100
    bytes."""
    with announced_segment() as (client, slots, mailbox):
        array = shared_empty(1 << 20, np.uint8)
        array[:] = 120
        buffer, _ = REGISTRY.locate(array.data)
        client.push([buffer_announcement(buffer.name, buffer.size)], 10)
        assert slots.claim_ticket(buffer.number, 0, 100, 0) == 0
        yield client, slots, buffer, mailbox
        del array


def _forged_name(buffer) -> str:
    """``buffer``'s name with another descriptor number: a file its maker does not hold."""
    pid, _, number, token = buffer.name.split("-")[2:]
    return f"ipupod-buffer-{pid}-999-{number}-{token}"


@pytest.mark.parametrize("messages, complaint", [
    (lambda s, b: [buffer_reference(HEADER, s.name, 0, _forged_name(b), 0, 100)],
     "was not announced on this link"),
    (lambda s, b: [buffer_reference(HEADER, "ipupod-slots-1-x-0123456789abcdef", 0, b.name,
                                    0, 100)], "unknown shared-memory segment"),
    (lambda s, b: [buffer_reference(HEADER, s.name, 1, b.name, 0, 100)],
     "not in flight under ticket 1"),
    (lambda s, b: [buffer_reference(HEADER, s.name, 0, b.name, 8, 100)],
     "not in flight under ticket 0"),
    (lambda s, b: [buffer_reference(HEADER, s.name, 0, b.name, 0, 101)],
     "not in flight under ticket 0"),
    (lambda s, b: [buffer_reference(HEADER, s.name, TICKETS, b.name, 0, 100)],
     "outside segment"),
    (lambda s, b: [buffer_reference(HEADER, s.name, 0, b.name, 0, 100)] * 2,
     "ticket 0 .* referred to twice"),
    (lambda s, b: [buffer_announcement("../../etc/passwd", 100)], "not a shared buffer's name"),
    (lambda s, b: [buffer_announcement(_forged_name(b), b.size)], "cannot be opened|not held"),
    (lambda s, b: [buffer_announcement(b.name, b.size + 1)], "not a private file of"),
    (lambda s, b: [buffer_announcement(b.name, 0)], "unknown shared-memory segment ''"),
])
def test_a_buffer_reference_the_sender_did_not_put_in_flight_is_refused_and_the_server_serves_on(
        raw_link, messages, complaint):
    client, slots, buffer, mailbox = raw_link
    with pytest.raises(DeviceError, match=f"malformed chunk arrived on a link: .*({complaint})"):
        client.push(messages(slots, buffer), 10)
    assert client.ping() == "receiver"
    mailbox.discard("h")  # what a refused stream had filed is dropped, its ticket handed back
    ticket = slots.claim_ticket(buffer.number, 100, 50, 10)
    whole = encode_header("h", 0, 0, 0, 1, 2, 0, 50)
    client.push([buffer_reference(whole, slots.name, ticket, buffer.name, 100, 50)], 10)
    (_, data), = mailbox.take(TransferKey("h", 0, 0, 0), 5, "IPU 1")
    assert data == b"x" * 50
    slots.landed([ticket], 10)


def test_buffer_references_and_announcements_are_protobuf_chunk_fields():
    from ipupod_proto import link_pb2

    reference = link_pb2.Chunk.FromString(buffer_reference(HEADER, "seg", 3, "buf", 1 << 33, 99))
    assert (reference.collective, reference.slot_segment, reference.slot, reference.buffer,
            reference.buffer_offset, reference.slot_length) == ("h", "seg", 3, "buf", 1 << 33, 99)
    announced = link_pb2.Chunk.FromString(buffer_announcement("buf", 5 << 30))
    assert (announced.buffer, announced.buffer_bytes, announced.buffer_forget) == ("buf",
                                                                                   5 << 30, False)
    assert link_pb2.Chunk.FromString(buffer_forgotten("buf")).buffer_forget


def test_a_receiver_range_check_covers_the_buffer_even_when_the_ticket_agrees(raw_link):
    client, slots, buffer, _ = raw_link
    ticket = slots.claim_ticket(buffer.number, buffer.size - 10, 100, 10)
    with pytest.raises(DeviceError, match="outside shared buffer"):
        client.push([buffer_reference(HEADER, slots.name, ticket, buffer.name,
                                      buffer.size - 10, 100)], 10)


def test_a_forgotten_buffer_cannot_be_referred_to(raw_link):
    client, slots, buffer, _ = raw_link
    client.push([buffer_forgotten(buffer.name)], 10)
    with pytest.raises(DeviceError, match="was not announced on this link"):
        client.push([buffer_reference(HEADER, slots.name, 0, buffer.name, 0, 100)], 10)


def test_the_buffers_of_a_process_that_is_gone_are_unmapped():
    maker = subprocess.Popen(
        [sys.executable, "-c", "import sys, numpy as np\n"
         "from ipu_node.links.shared_buffers import REGISTRY, shared_empty\n"
         "a = shared_empty(1 << 20, np.uint8)\n"
         "b, _ = REGISTRY.locate(a.data)\n"
         "print(b.name, b.size, flush=True)\n"
         "sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        name, size = maker.stdout.readline().split()
        receiver = PeerBuffers("card")
        receiver.attach(name, int(size))
        assert len(receiver) == 1 and maker.pid in mapped_buffers(os.getpid())
    finally:
        maker.kill()
        maker.wait()
    receiver.drop_gone()
    assert len(receiver) == 0 and maker.pid not in mapped_buffers(os.getpid())


# real collectives on real Ray: the cards read each other's buffers; a restart


@pytest.fixture(scope="module")
def pod(ray_session):
    before = set(os.listdir(SHM_FOLDER))
    launched = EmulatedPod.launch("pod16")
    yield launched
    launched.shutdown()
    assert not {n for n in set(os.listdir(SHM_FOLDER)) - before if n.startswith("ipupod-")}


def test_cards_reduce_from_each_others_buffers_in_place_with_exact_results(pod):
    rng = np.random.default_rng(3)
    arrays = [rng.integers(-1000, 1000, 3 * CHUNK_BYTES // 4 + 7).astype(np.int32)
              for _ in range(16)]
    pod.put("grad", arrays)
    for _ in range(2):  # the second works in place in the first one's shared buffers
        pod.collective("allreduce", "grad", output="grad", algorithm="halving_doubling")
    got = pod.get("grad")
    want = 16 * np.sum(arrays, axis=0)  # summed, then 16 equal sums summed
    assert all(np.array_equal(g, want) for g in got)
    pids = [info["pid"] for info in pod.infos]
    assert all(set(mapped_buffers(pid)) - {pid} for pid in pids)  # each maps a peer's


def current_pids(pod) -> list[int]:
    return [ray.get(actor.info.remote(), timeout=30)["pid"] for actor in pod.actors]


def test_after_a_restart_peers_drop_the_dead_cards_buffers_and_results_stay_exact(pod):
    arrays = [np.full(CHUNK_BYTES // 2, r, dtype=np.int32) for r in range(16)]
    pod.collective("allreduce", arrays)
    dead = current_pids(pod)[1]
    assert any(dead in mapped_buffers(pid) for pid in current_pids(pod) if pid != dead)
    pod.kill_card(pod.specs[1].name)
    result = pod.collective("allreduce", arrays)
    assert all(np.array_equal(r, np.full(CHUNK_BYTES // 2, 120)) for r in result.results)
    pod.stats()  # asked how they are, devices drop what dead processes left them
    pids = current_pids(pod)
    assert dead not in pids and not any(dead in mapped_buffers(pid) for pid in pids)
