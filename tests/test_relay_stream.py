"""A relay passes chunks on as they arrive: a stream longer than its sender's shared-memory
slots goes through whole (the relay never holds it all), bytes unchanged, each slot handed
back once its chunk is on the onward link; it sends on through slots of its own but never
waits for one (a chunk that finds none goes inline); an onward link that fails fails the
stream. Pushes run on threads kept from one push to the next, and never wait for another
push to end."""

import mmap
import threading
import time

import numpy as np
import pytest

from ipu_node.device_errors import DeviceError
from ipu_node.links.channel import LinkClient, LinkServer, Transfer, encode_transfers
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.links.shared_link import Relay
from ipu_node.relay_stream import OnwardPush, Pushers
from tests.link_peer import wait_until

PIECE = 100 << 10  # above the smallest payload that goes through a slot
TRANSFERS = 12  # one chunk each: six times the sender's slots


def relay_to(client: LinkClient, seen: list[bool]) -> Relay:
    """A relay that passes every chunk to ``client``'s device, noting for each whether it
    arrived in shared memory."""

    def forward(arrivals):
        push = OnwardPush(client.push, 20)
        total = count = 0
        for arrival in arrivals:
            seen.append(arrival.release is not None)
            total, count = total + len(arrival.payload), count + 1
            push.put(arrival, time.monotonic() + 20)
        push.finish(time.monotonic() + 20)
        return total, count

    return Relay(forward)


@pytest.fixture
def card():
    mailbox = Mailbox()
    server = LinkServer("card", mailbox)
    server.start()
    yield mailbox, server
    server.stop()


def test_a_stream_longer_than_the_senders_slots_is_relayed_whole_from_shared_memory(card):
    mailbox, card_server = card
    to_card = LinkClient("card", card_server.link_address,
                         limits=LinkLimits(shared_memory_slots=0))
    seen: list[bool] = []
    host = LinkServer("host", relay_to(to_card, seen))
    host.start()
    sender = LinkClient("host", host.link_address, limits=LinkLimits(shared_memory_slots=2))
    payloads = [np.random.default_rng(n).integers(0, 255, PIECE, np.uint8)
                for n in range(TRANSFERS)]
    try:
        sent = sender.push(encode_transfers("r", 0, 0, [Transfer(n, 0, 1, p) for n, p in
                                                         enumerate(payloads)]), 20)
        assert sent == TRANSFERS * PIECE
        assert seen == [True] * TRANSFERS and host.slots is not None
        for n, payload in enumerate(payloads):
            (_, data), = mailbox.take(TransferKey("r", 0, 0, n), 5, "host")
            assert bytes(data) == payload.tobytes()
    finally:
        sender.close()
        to_card.close()
        host.stop()


def test_a_relay_sends_on_through_its_own_slots_and_inline_when_the_receiver_holds_them(card):
    mailbox, card_server = card
    to_card = LinkClient("card", card_server.link_address,
                         limits=LinkLimits(shared_memory_slots=2, shared_memory_waits=False))
    host = LinkServer("host", relay_to(to_card, []))
    host.start()
    sender = LinkClient("host", host.link_address, limits=LinkLimits(shared_memory_slots=2))
    payloads = [np.random.default_rng(n).integers(0, 255, PIECE, np.uint8)
                for n in range(TRANSFERS)]
    try:  # nobody lands a chunk at the card until the push is over: it must not wait
        sender.push(encode_transfers("r", 0, 0, [Transfer(n, 0, 1, p) for n, p in
                                                 enumerate(payloads)]), 20)
        in_slots = []
        for n, payload in enumerate(payloads):
            for _, data in mailbox.chunks(TransferKey("r", 0, 0, n), 5, "host"):
                assert bytes(data) == payload.tobytes()
                in_slots.append(isinstance(getattr(data, "obj", None), mmap.mmap))
        assert in_slots == [True] * 2 + [False] * (TRANSFERS - 2)
    finally:
        sender.close()
        to_card.close()
        host.stop()


def test_an_onward_link_that_fails_fails_the_relayed_stream(card):
    _, card_server = card
    to_nowhere = LinkClient("card", card_server.address)
    card_server.stop()  # nothing listens there now
    host = LinkServer("host", relay_to(to_nowhere, []))
    host.start()
    sender = LinkClient("host", host.link_address, limits=LinkLimits(shared_memory_slots=2))
    try:
        with pytest.raises(DeviceError, match="failed"):
            sender.push(encode_transfers("r", 0, 0, [Transfer(n, 0, 1, np.zeros(PIECE, np.uint8))
                                                     for n in range(TRANSFERS)]), 20)
    finally:
        sender.close()
        to_nowhere.close()
        host.stop()


def test_a_push_runs_on_the_thread_an_ended_push_left_idle():
    pushers = Pushers("test-push", kept=1)
    ran_on: list[int] = []
    pushers.run(lambda: ran_on.append(threading.get_ident()))
    assert wait_until(lambda: pushers.idle == 1)
    pushers.run(lambda: ran_on.append(threading.get_ident()))
    assert wait_until(lambda: len(ran_on) == 2 and pushers.idle == 1)
    assert ran_on[0] == ran_on[1]


def test_a_push_never_waits_for_another_to_end_and_idle_threads_are_bounded():
    pushers = Pushers("test-push-bounded", kept=1)
    second_ran = threading.Event()
    first_done = threading.Event()

    def first():  # waits on a push that starts after it: a bounded pool could hang here
        assert second_ran.wait(20)
        first_done.set()

    pushers.run(first)
    pushers.run(second_ran.set)
    assert first_done.wait(20)
    # two threads ran; one is kept idle, the other ended
    assert wait_until(lambda: pushers.idle == 1 and sum(
        t.name == "test-push-bounded" for t in threading.enumerate()) == 1)
