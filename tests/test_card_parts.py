"""The parts of a card actor work without Ray: its tensor store accounts memory and reuses
buffers, and plain Card objects wired over real loopback links run a collective to the
NumPy reference, counting what they sent."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import ray

from cluster.errors import UserError
from cluster.model.spec import load_topology
from gcl import plan
from gcl.reference import expected
from ipu_node.card import Card
from ipu_node.device_errors import DeviceError, OutOfMemory
from ipu_node.device_spec import describe, device_specs
from ipu_node.links.transport import Transport, register, transport
from ipu_node.ownership import ownership
from ipu_node.store import TensorStore


@pytest.fixture(scope="module")
def dss8440():
    return load_topology("dss8440")


def test_the_store_accounts_each_tensor_in_its_ipus_memory(dss8440):
    store = TensorStore(dss8440, (0, 1))
    capacity = store.memory_stats()[0]["capacity_bytes"]
    store.put(0, "w", np.zeros(1000, np.float32))
    assert store.memory_stats()[0]["used_bytes"] == 4000
    assert store.memory_stats()[1]["used_bytes"] == 0
    assert store.info("w") == {0: ((1000,), "float32")}
    store.free(0, "w")
    assert store.memory_stats()[0]["free_bytes"] == capacity
    with pytest.raises(DeviceError, match="holds no tensor 'w'"):
        store.get(0, "w")


def test_the_store_refuses_a_tensor_bigger_than_the_ipu(dss8440):
    store = TensorStore(dss8440, (0,))
    too_big = store.memory_stats()[0]["capacity_bytes"] + 1
    with pytest.raises(OutOfMemory, match="use smaller tensors or more IPUs"):
        store.memory[0].allocate("huge", too_big)


def test_the_store_hands_back_a_recycled_buffer_of_the_same_shape(dss8440):
    store = TensorStore(dss8440, (0,))
    first = store.empty(256, np.float32)
    store.recycle({"work": first})
    assert store.empty(256, np.float32) is first
    assert store.empty(256, np.float32) is not first  # only one was spare


def test_read_only_tensors_are_never_recycled(dss8440):
    store = TensorStore(dss8440, (0,))
    frozen = np.zeros(16, np.float32)
    frozen.flags.writeable = False
    store.recycle({"work": frozen})
    assert store.empty(16, np.float32) is not frozen


def test_plain_cards_on_loopback_links_allreduce_to_the_reference(dss8440):
    specs = device_specs(dss8440)
    cards = [Card(spec, dss8440) for spec in specs]
    try:
        infos = [card.info() for card in cards]
        owner = np.array([next(i for i, s in enumerate(specs) if ipu in s.ipus)
                          for ipu in range(dss8440.ipu_count)])
        owns = ownership(dss8440, owner, {})
        for index, card in enumerate(cards):
            card.connect([i["name"] for i in infos], [i["link_address"] for i in infos],
                         index, owns)
        schedule = plan("allreduce", dss8440, count=1000, algorithm_name="clockwise_ring")
        rng = np.random.default_rng(7)
        arrays = [rng.integers(-50, 50, 1000).astype(np.int32) for _ in range(16)]
        ranks = [{ipu: (0, int(np.flatnonzero(schedule.groups[0] == ipu)[0]))
                  for ipu in spec.ipus} for spec in specs]
        with ThreadPoolExecutor(len(cards)) as pool:
            answers = list(pool.map(
                lambda i: cards[i].run(schedule, "c1", ranks[i],
                                       {ipu: arrays[ipu] for ipu in specs[i].ipus},
                                       None, "sum", 10.0, 1e-3), range(len(cards))))
        want = expected("allreduce", arrays, "sum", 0)[0]
        for results, *_ in answers:
            for got in results.values():
                np.testing.assert_array_equal(got, want)
        sent = sum(answer.link_bytes for answer in answers)
        assert sent.sum() > 0
        stats = cards[0].stats()
        assert stats["counters"][0]["sim_seconds"] == pytest.approx(1e-3)
        assert stats["counters"][0]["bytes_out"] > 0
    finally:
        for card in cards:
            card.shutdown()


def test_errors_name_a_card_by_its_ipus(dss8440):
    assert describe(device_specs(dss8440)[3]) == "s0.card3 (IPUs 6, 7)"


def test_an_unknown_link_transport_is_refused_with_the_known_ones():
    with pytest.raises(UserError, match="no link transport named 'carrier-pigeon': use one of "
                                        "grpc-h2"):
        transport("carrier-pigeon")


def test_the_transport_registry_checks_what_it_is_given():
    assert transport().name == "grpc-h2"
    with pytest.raises(ValueError, match="registered already"):
        register(transport("grpc-h2"))
    with pytest.raises(TypeError, match="must be callables"):
        register(Transport("broken", "server", "client"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="register a Transport"):
        register("grpc-h2")  # type: ignore[arg-type]


def test_a_plain_card_does_not_start_ray(dss8440):
    was_running = ray.is_initialized()
    card = Card(device_specs(dss8440)[0], dss8440)
    try:
        assert card.info()["node_id"] is None or was_running
        assert ray.is_initialized() == was_running
    finally:
        card.shutdown()
