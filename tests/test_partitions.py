"""V-IPU partitions: names, sizes and GCDs are checked with a message that says what is
allowed; placements are aligned blocks inside one IPU-Link domain (or whole domains); two
partitions never share an IPU; every failure carries the gRPC status the service returns."""

import random
import threading

import numpy as np
import pytest

from cluster.errors import UserError
from cluster.model.presets import build_preset
from cluster.model.routing import router_of
from cluster.service.partitions import (
    RESOURCE_EXHAUSTED,
    Partition,
    PartitionError,
    PartitionTable,
    block_order,
)


@pytest.fixture(scope="module")
def topologies():
    return {spec: build_preset(spec) for spec in ("dss8440", "dss8440x2", "pod16", "pod64")}


def table(topologies, spec):
    return PartitionTable(topologies[spec])


def ring(topology):
    return topology.ring_order.tolist()


def server_ipus(topology, server):
    return {ipu for unit in topology.units if unit.server == server for ipu in unit.ipus}


def error(code, call, *args, **kwargs):
    with pytest.raises(PartitionError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, str(info.value)
    return str(info.value)


# -- round trip --------------------------------------------------------------------------
def test_create_get_list_remove_round_trip(topologies):
    parts = table(topologies, "dss8440x2")
    a = parts.create("train-a", 8, gcds=2)
    b = parts.create("infer.b_1", 4)
    assert isinstance(a, Partition) and a.size == 8 and a.gcds == 2
    assert parts.get("train-a") is a
    assert [p.name for p in parts.list()] == ["train-a", "infer.b_1"]
    assert all(parts.partition_of(ipu) == "train-a" for ipu in a.ipus)
    assert set(parts.free_ipus()) == set(range(32)) - set(a.ipus) - set(b.ipus)
    assert parts.free_ipus() == sorted(parts.free_ipus())
    assert parts.remove("train-a") is a
    assert [p.name for p in parts.list()] == ["infer.b_1"]
    assert all(parts.partition_of(ipu) is None for ipu in a.ipus)
    assert parts.create("train-a", 8).ipus == a.ipus  # the freed block is reused


def test_gcds_are_aligned_blocks_of_the_partition_two_ipus_are_a_card(topologies):
    partition = table(topologies, "dss8440").create("p", 8, gcds=4)
    slices = partition.gcd_ipus()
    assert slices == [(0, 1), (2, 3), (4, 5), (6, 7)]  # four C2 cards
    assert sorted(ipu for s in slices for ipu in s) == sorted(partition.ipus)
    assert Partition("q", (1, 2, 3, 4), 1).gcd_ipus() == [(1, 2, 3, 4)]


def test_errors_are_user_errors_with_a_grpc_code(topologies):
    parts = table(topologies, "dss8440")
    with pytest.raises(UserError):
        parts.create("", 1)
    with pytest.raises(ValueError):
        PartitionError("OOPS", "not a code")


# -- owners and quotas ---------------------------------------------------------------
def test_an_owners_quota_counts_only_their_own_partitions(topologies):
    parts = table(topologies, "dss8440x2")
    parts.create("mine", 8)
    parts.claim("mine", "ann")
    parts.create("theirs", 8)
    parts.claim("theirs", "bob")
    assert parts.held_by("ann") == (8, 1) and parts.held_by("nobody") == (0, 0)
    parts.check_quota("ann", "more", 8, 16)  # up to the quota: allowed
    parts.check_quota("ann", "more", 16, 0)  # 0: no quota
    message = error(RESOURCE_EXHAUSTED, parts.check_quota, "ann", "more", 16, 16)
    assert message == ("cannot create partition 'more' of 16 IPUs: ann holds 8 IPUs of a "
                       "quota of 16 (--max-ipus), so 8 more at most; remove a partition first")
    parts.remove("mine")
    parts.check_quota("ann", "more", 16, 16)


# -- placement ---------------------------------------------------------------------------
def test_two_halves_of_a_server_take_four_adjacent_cards_each(topologies):
    parts = table(topologies, "dss8440")
    first, second = parts.create("a", 8), parts.create("b", 8)
    assert first.ipus == (0, 2, 4, 6, 7, 5, 3, 1)  # cards 0-3, ring up one rail, down the other
    assert second.ipus == (8, 10, 12, 14, 15, 13, 11, 9)
    assert first.units == ("s0.card0", "s0.card1", "s0.card2", "s0.card3")
    assert parts.free_ipus() == []


def test_sixteen_ipus_on_two_servers_take_exactly_one_server(topologies):
    topology = topologies["dss8440x2"]
    parts = table(topologies, "dss8440x2")
    partition = parts.create("one-server", 16)
    assert set(partition.ipus) == server_ipus(topology, 0)
    assert list(partition.ipus) == ring(topology)[:16]
    assert set(parts.create("other", 16).ipus) == server_ipus(topology, 1)


def test_thirty_two_ipus_take_both_servers(topologies):
    topology = topologies["dss8440x2"]
    partition = table(topologies, "dss8440x2").create("all", 32)
    assert list(partition.ipus) == ring(topology)


def test_a_partition_larger_than_a_free_domain_waits_for_whole_domains(topologies):
    parts = table(topologies, "dss8440x2")
    parts.create("small", 1)
    message = error("RESOURCE_EXHAUSTED", parts.create, "all", 32)
    assert "31 of 32 IPUs" in message and "largest partition that can be created now, has 16" \
        in message


def test_placement_is_best_fit_so_big_blocks_stay_whole(topologies):
    parts = table(topologies, "dss8440")
    parts.create("eight", 8)                # cards 0-3
    parts.create("one", 1)                  # IPU 8, on card 4
    parts.remove("eight")                   # cards 0-3 free again, IPUs 9..15 free
    four = parts.create("four", 4)          # fits on cards 6-7, keeping cards 0-3 whole
    assert sorted(four.ipus) == [12, 13, 14, 15]
    assert sorted(parts.create("pair", 2).ipus) == [10, 11]  # card 5, beside the single
    assert parts.create("single", 1).ipus == (9,)            # the single's card-mate
    assert sorted(parts.create("eight-again", 8).ipus) == list(range(8))


def test_small_partitions_fill_one_server_before_touching_the_other(topologies):
    topology = topologies["dss8440x2"]
    parts = table(topologies, "dss8440x2")
    made = [parts.create(f"p{i}", size) for i, size in enumerate([1, 2, 4, 8, 1])]
    used = {ipu for p in made for ipu in p.ipus}
    assert used <= server_ipus(topology, 0)
    assert set(parts.create("big", 16).ipus) == server_ipus(topology, 1)


def check_invariants(parts, topology):
    """No IPU in two partitions; every placement an aligned block of one domain's block
    order, or whole domains; its ring in the topology's ring order."""
    domain_of = router_of(topology).domain_of_ipu
    members = {int(domain_of[int(m[0])]): m.tolist() for m in block_order(topology)}
    position = {ipu: k for k, ipu in enumerate(ring(topology))}
    seen = set()
    for p in parts.list():
        assert not seen & set(p.ipus), f"{p.name} overlaps another partition"
        seen |= set(p.ipus)
        assert all(parts.partition_of(ipu) == p.name for ipu in p.ipus)
        assert list(p.ipus) == sorted(p.ipus, key=position.get)
        domains = {int(domain_of[ipu]) for ipu in p.ipus}
        if len(domains) == 1:
            sequence = members[domains.pop()]
            start = sequence.index(p.block[0])
            assert start % p.size == 0
            assert list(p.block) == sequence[start:start + p.size]
        else:
            assert sorted(p.ipus) == sorted(i for d in domains for i in members[d])
    assert set(parts.free_ipus()) == set(range(topology.ipu_count)) - seen


@pytest.mark.parametrize("spec", ["dss8440", "dss8440x2", "pod64"])
def test_random_creates_and_removes_never_overlap(topologies, spec):
    topology = topologies[spec]
    parts = table(topologies, spec)
    rng = random.Random(20240611)
    sizes = [1 << k for k in range(topology.ipu_count.bit_length())]
    exhausted = whole = 0
    for step in range(400):
        if rng.random() < 0.03:  # now and then empty it: then a partition of every IPU fits
            for p in parts.list():
                parts.remove(p.name)
            whole += parts.create(f"p{step}", topology.ipu_count).size == topology.ipu_count
        elif parts.list() and rng.random() < 0.4:
            parts.remove(rng.choice(parts.list()).name)
        else:
            size = rng.choice(sizes[:-1] if rng.random() < 0.95 else sizes)
            try:
                parts.create(f"p{step}", size, gcds=rng.choice([g for g in sizes if g <= size]))
            except PartitionError as e:
                assert e.code == "RESOURCE_EXHAUSTED"
                assert f"{len(parts.free_ipus())} of {topology.ipu_count} IPUs" in str(e)
                exhausted += 1
        check_invariants(parts, topology)
    assert exhausted > 0  # the loop did reach a full or fragmented topology
    assert whole > 0  # and placed a partition of every IPU (both domains on dss8440x2)


def test_concurrent_creates_never_overlap(topologies):
    parts = table(topologies, "pod64")
    errors = []

    def worker(t):
        for i in range(16):
            try:
                parts.create(f"t{t}-{i}", 1 << (i % 3))
            except PartitionError as e:
                errors.append(e.code)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check_invariants(parts, topologies["pod64"])
    assert set(errors) <= {"RESOURCE_EXHAUSTED"}


# -- errors ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["分区", "", "a" * 65, " x", "x ", "-x", ".x", "a/b", "a\n",
                                  None, 7])
def test_bad_names_are_invalid_arguments_saying_what_is_allowed(topologies, name):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440").create, name, 1)
    assert "1 to 64 characters" in message and "letters, digits, '-', '_' and '.'" in message


def test_a_huge_name_is_cut_short_in_the_message(topologies):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440").create, "a" * 10_000, 1)
    assert "10000 characters" in message and len(message) < 400


def test_longest_and_shortest_names_are_allowed(topologies):
    parts = table(topologies, "dss8440")
    assert parts.create("a" * 64, 1).name == "a" * 64
    assert parts.create("0", 1).name == "0"


@pytest.mark.parametrize("size", [0, 3, 64, -4, 6])
def test_sizes_that_are_not_powers_of_two_up_to_the_ipu_count_are_refused(topologies, size):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440x2").create, "p", size)
    assert f"size {size} is not allowed" in message
    assert "power of two from 1 to 32" in message


@pytest.mark.parametrize("size", [True, 2.0, "4", None])
def test_sizes_that_are_not_integers_are_refused(topologies, size):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440x2").create, "p", size)
    assert "size must be an integer" in message and "power of two from 1 to 32" in message


def test_numpy_integer_sizes_are_accepted(topologies):
    assert table(topologies, "dss8440").create("p", np.int64(4), np.int32(2)).size == 4


@pytest.mark.parametrize("gcds", [0, 3, -1, 16, False, 1.0])
def test_gcds_that_do_not_split_the_size_into_powers_of_two_are_refused(topologies, gcds):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440").create, "p", 8, gcds)
    assert "gcds" in message and "divides the size 8" in message


def test_a_taken_name_already_exists(topologies):
    parts = table(topologies, "dss8440")
    parts.create("p", 2)
    message = error("ALREADY_EXISTS", parts.create, "p", 2)
    assert "'p' already exists" in message
    assert len(parts.list()) == 1 and len(parts.free_ipus()) == 14


def test_a_full_topology_is_resource_exhausted_with_no_free_ipus(topologies):
    parts = table(topologies, "dss8440")
    parts.create("all", 16)
    message = error("RESOURCE_EXHAUSTED", parts.create, "more", 1)
    assert "0 of 16 IPUs" in message and "are free" in message
    assert "remove a partition" in message


def test_a_fragmented_topology_says_how_many_ipus_are_free_and_the_largest_block(topologies):
    parts = table(topologies, "dss8440")
    for i in range(16):
        parts.create(f"p{i}", 1)
    for ipu in range(0, 16, 2):  # free one IPU of every card: 8 IPUs, no card whole
        parts.remove(parts.partition_of(ipu))
    message = error("RESOURCE_EXHAUSTED", parts.create, "pair", 2)
    assert "8 of 16 IPUs" in message and "are free" in message
    assert "largest partition that can be created now, has 1 IPU" in message
    assert len(parts.free_ipus()) == 8  # a failed create changes nothing


def test_unknown_partitions_are_not_found_and_the_message_lists_the_existing_ones(topologies):
    parts = table(topologies, "dss8440")
    message = error("NOT_FOUND", parts.get, "ghost")
    assert "'ghost'" in message and "there are none" in message
    parts.create("alpha", 1)
    parts.create("beta", 1)
    message = error("NOT_FOUND", parts.remove, "ghost")
    assert "'ghost'" in message and "alpha, beta" in message
    parts.remove("alpha")
    error("NOT_FOUND", parts.remove, "alpha")


@pytest.mark.parametrize("ipu", [-1, 16, True, "3"])
def test_partition_of_an_ipu_that_does_not_exist_is_refused(topologies, ipu):
    message = error("INVALID_ARGUMENT", table(topologies, "dss8440").partition_of, ipu)
    assert "numbered 0 to 15" in message


# -- V-IPU's placement: blocks of the IPU-Link topology -----------------------------------
@pytest.mark.parametrize("spec, sizes, placed", [
    ("dss8440", [2, 4, 2, 8], [[0, 1], [4, 5, 6, 7], [2, 3], list(range(8, 16))]),
    ("dss8440", [16], [list(range(16))]),
    ("dss8440x2", [8, 16, 4, 2, 2], [list(range(8)), list(range(16, 32)), [8, 9, 10, 11],
                                     [12, 13], [14, 15]]),
    ("dss8440x2", [32], [list(range(32))]),
    ("pod16", [2, 4, 8, 1], [[0, 1], [4, 5, 6, 7], list(range(8, 16)), [2]]),
    ("pod64", [4, 16, 8, 32], [[0, 1, 2, 3], list(range(16, 32)), list(range(8, 16)),
                               list(range(32, 64))]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_partitions_are_placed_on_cards_machines_and_servers_as_v_ipu_does(
        topologies, spec, sizes, placed):
    parts = table(topologies, spec)
    for i, (size, ipus) in enumerate(zip(sizes, placed)):
        assert sorted(parts.create(f"p{i}", size).ipus) == ipus, f"{size} IPUs"


def test_a_partition_names_its_units_and_ipus_per_ipu_link_domain(topologies):
    parts = table(topologies, "dss8440x2")
    card = parts.create("card", 2)
    assert card.units == ("s0.card0",) and card.ild_size == 2
    whole = table(topologies, "dss8440x2").create("whole", 32)
    assert whole.ild_size == 16 and len(whole.units) == 16
    machine = table(topologies, "pod64").create("m", 4)
    assert machine.units == ("r0.m0",) and machine.ipus == (0, 2, 3, 1)


def ipu_link_pairs(topology):
    names = [t.name for t in topology.link_types]
    return {frozenset((int(a), int(b))) for a, b, kind in
            zip(topology.link_a, topology.link_b, topology.link_type)
            if names[kind].startswith("ipu-link")}


@pytest.mark.parametrize("spec", ["dss8440", "dss8440x2", "pod16", "pod64"])
def test_every_hop_of_a_partitions_ring_inside_a_domain_is_one_ipu_link(topologies, spec):
    topology = topologies[spec]
    linked, domain_of = ipu_link_pairs(topology), router_of(topology).domain_of_ipu
    for size in (2, 4, 8, 16, 32):
        if size > topology.ipu_count:
            continue
        parts = table(topologies, spec)
        while True:
            try:
                ring_ = parts.create(f"p{len(parts.list())}", size).ipus
            except PartitionError:
                break
            hops = zip(ring_, ring_[1:] + ring_[:1]) if size > 2 else [ring_]
            for a, b in hops:
                if domain_of[a] == domain_of[b]:
                    assert frozenset((a, b)) in linked, f"{spec}: {a}-{b} in {ring_}"


def ladder(cards):
    """``cards`` C2 cards joined by rails, alone: the block of a DSS 8440 they would be."""
    from cluster.model import hardware as hw
    from cluster.model.builder import TopologyBuilder
    from cluster.model.presets.dss8440 import ladder_ring

    b = TopologyBuilder(f"ladder{cards}")
    ipus = b.add_ipus([f"card{c}.ipu{k}" for c in range(cards) for k in range(2)], hw.gc2())
    grid = ipus.reshape(cards, 2)
    b.add_links(grid[:, 0], grid[:, 1], hw.c2_rung())
    if cards > 1:
        b.add_links(grid[:-1, :], grid[1:, :], hw.c2_rail())
    b.ring_order = ladder_ring(cards)
    return b.build()


@pytest.mark.parametrize("spec, size, alone", [
    ("dss8440", 2, lambda: ladder(1)), ("dss8440", 8, lambda: ladder(4)),
    ("dss8440x2", 16, lambda: build_preset("dss8440")),
    ("pod64", 16, lambda: build_preset("pod16")),
])
def test_a_partitions_bus_bandwidth_is_that_of_the_same_block_alone(
        topologies, spec, size, alone):
    from gcl.bench_rows import run_phantom
    from gcl.bench_spec import BenchSpec, SizeRange
    from gcl.collectives import collective

    partition = table(topologies, spec).create("p", size)
    bench = BenchSpec(collective("allreduce"), SizeRange(4 << 20, 64 << 20, 16))
    on_partition = run_phantom(bench.place(topologies[spec], list(partition.ipus)))
    by_itself = run_phantom(bench.place(alone()))
    for row, reference in zip(on_partition, by_itself, strict=True):
        assert row.busbw_GBps == pytest.approx(reference.busbw_GBps, rel=1e-6), row.bytes
