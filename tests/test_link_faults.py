"""Link faults: a degraded link slows exactly what crosses it, a cut IPU-Link is routed
round, a cut tree link stops what needs it, and healing gives the healthy times back.
Expected delays are worked out by hand from the catalogue numbers."""

import pickle
from pathlib import Path

import numpy as np
import pytest

from cluster.errors import ScheduleError, SpecError, UserError
from cluster.model.costmodel import send_seconds
from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkDown, LinkFault, find_link, link_name
from cluster.model.routing import router_of
from cluster.model.spec import load_topology
from gcl.planner import plan_timed

RING8 = str(Path(__file__).resolve().parent.parent / "examples" / "topologies" / "ring8.yaml")
MiB = 1 << 20
# ring8: N = 8 IPUs, a = 1000 ns and B = 50 GB/s per link and direction, no sync or reduce.
N, A, B = 8, 1e-6, 50e9
PCIE_GEN3 = 8e9 * 16 * 128 / 130 / 8  # 15.75 GB/s each way
IPU_LINK_SECONDS = 300e-9
TREE_HOP_SECONDS = 1e-6  # PCIe and InfiniBand


@pytest.fixture(scope="module")
def ring8():
    return load_topology(RING8)


@pytest.fixture(scope="module")
def dss8440x2():
    return load_topology("dss8440x2")


def allreduce_seconds(topology, nbytes, algorithm="clockwise_ring", ipus=None):
    count = nbytes // 4
    return plan_timed("allreduce", topology, count, algorithm_name=algorithm,
                      ipus=ipus)[1].sim_seconds


def faulted(topology, link_text, **fault):
    return with_faults(topology, {find_link(topology, link_text): LinkFault(**fault)})


def labels(topology, src, dst):
    return [topology.link_label(link) for link in router_of(topology).path(src, dst)]


# -- degraded links ---------------------------------------------------------------------

def test_halving_one_ring_link_makes_every_ring_step_run_at_half_bandwidth(ring8):
    size = 8 * MiB
    slow = faulted(ring8, "ipu3--ipu4", bandwidth_factor=0.5)
    # Each of the 2(N-1) steps moves S/N over every link at once; the halved link is the
    # slowest, so it sets every step.
    expected = 2 * (N - 1) * (A + size / (N * 0.5 * B))
    assert allreduce_seconds(slow, size) == pytest.approx(expected, rel=1e-9)
    assert allreduce_seconds(ring8, size) == pytest.approx(2 * (N - 1) * (A + size / (N * B)),
                                                           rel=1e-9)


def test_added_latency_adds_it_once_per_step_when_each_step_crosses_the_link_once(ring8):
    size, added = 8 * MiB, 2.5e-6
    late = faulted(ring8, "ipu3--ipu4", added_latency_seconds=added)
    expected = 2 * (N - 1) * (A + added + size / (N * B))
    assert allreduce_seconds(late, size) == pytest.approx(expected, rel=1e-9)
    assert allreduce_seconds(late, size) - allreduce_seconds(ring8, size) == pytest.approx(
        2 * (N - 1) * added, rel=1e-6)


def test_a_send_over_a_degraded_link_takes_latency_plus_added_plus_bytes_at_the_lower_rate(
        ring8):
    nbytes, factor, added = 3e6, 0.25, 4e-6
    worse = faulted(ring8, "ipu5--ipu6", bandwidth_factor=factor, added_latency_seconds=added)
    expected = A + added + nbytes / (B * factor)
    assert send_seconds(worse, 5, 6, nbytes) == pytest.approx(expected, rel=1e-12)
    assert send_seconds(worse, 6, 5, nbytes) == pytest.approx(expected, rel=1e-12)  # both ways
    assert send_seconds(worse, 0, 1, nbytes) == send_seconds(ring8, 0, 1, nbytes)  # others not


def test_one_of_two_infiniband_adapters_down_halves_the_bundle(dss8440x2):
    # The host's two adapters are one 25 GB/s bundle; at factor 0.5 it is 12.5 GB/s, slower
    # than PCIe Gen3 (15.75 GB/s), so it sets the rate. Eight hops of 1 us.
    nbytes = 100e6
    half = faulted(dss8440x2, "s0.host--ib-switch", bandwidth_factor=0.5)
    assert send_seconds(half, 1, 17, nbytes) == pytest.approx(
        8 * TREE_HOP_SECONDS + nbytes / 12.5e9, rel=1e-12)
    assert send_seconds(dss8440x2, 1, 17, nbytes) == pytest.approx(
        8 * TREE_HOP_SECONDS + nbytes / PCIE_GEN3, rel=1e-12)


def test_a_degraded_rung_on_pod16_sets_the_pace_of_the_ring():
    pod16 = load_topology("pod16")
    n, size, factor = 16, 16 * MiB, 0.5
    link_Bps, memory_Bps = 32e9, 47.5e12  # one Mk2 IPU-Link each way; GC200 tiles
    chunk = size / n
    slow = faulted(pod16, "r0.m0.ipu0--r0.m0.ipu1", bandwidth_factor=factor)  # ring hop 1 -> 0
    step = pod16.sync_local_seconds + IPU_LINK_SECONDS + chunk / (factor * link_Bps)
    expected = (n - 1) * (step + 3 * chunk / memory_Bps) + (n - 1) * step
    assert allreduce_seconds(slow, size) == pytest.approx(expected, rel=1e-9)


# -- cut IPU-Links ----------------------------------------------------------------------

def test_a_cut_ring_link_sends_its_traffic_the_other_way_round(ring8):
    cut = faulted(ring8, "ipu4--ipu3", cut=True)
    assert labels(cut, 3, 4) == [f"ipu{i} -> ipu{j} (ring-link)" for i, j in
                                 [(3, 2), (2, 1), (1, 0), (0, 7), (7, 6), (6, 5), (5, 4)]]
    nbytes = 1e6
    assert send_seconds(cut, 3, 4, nbytes) == pytest.approx(7 * A + nbytes / B, rel=1e-12)
    # In the clockwise ring every other flow goes i -> i+1; the detour runs the other way,
    # alone on its links, so a step is seven hops of latency and one chunk at full rate.
    size = 8 * MiB
    assert allreduce_seconds(cut, size) == pytest.approx(
        2 * (N - 1) * (7 * A + size / (N * B)), rel=1e-9)


def test_a_cut_rail_reroutes_inside_its_server_and_leaves_the_other_server_alone(dss8440x2):
    base = dss8440x2
    cut = faulted(base, "s0.card0.ipu0--s0.card1.ipu0", cut=True)
    # Without the rail: rung, rail, rung (0 -> 1 -> 3 -> 2); the rail (64 GB/s) is slowest.
    assert labels(cut, 0, 2) == ["s0.card0.ipu0 -> s0.card0.ipu1 (ipu-link-rung)",
                                 "s0.card0.ipu1 -> s0.card1.ipu1 (ipu-link-rail)",
                                 "s0.card1.ipu1 -> s0.card1.ipu0 (ipu-link-rung)"]
    assert send_seconds(cut, 0, 2, 1e6) == pytest.approx(3 * IPU_LINK_SECONDS + 1e6 / 64e9,
                                                         rel=1e-12)
    # Server 0's domain has lost an edge, so it no longer shares server 1's routing table.
    shapes = router_of(cut)._domains.shape_of_domain
    assert router_of(cut).domain_count == 2 and shapes[0] != shapes[1]
    assert len(set(router_of(base)._domains.shape_of_domain.tolist())) == 1
    for src, dst in [(16, 18), (16, 31), (20, 27)]:
        assert labels(cut, src, dst) == labels(base, src, dst)


def test_cutting_both_rails_between_two_cards_splits_the_server_into_two_domains():
    dss8440 = load_topology("dss8440")
    links = [find_link(dss8440, "s0.card3.ipu0--s0.card4.ipu0"),
             find_link(dss8440, "s0.card3.ipu1--s0.card4.ipu1")]
    split = with_faults(dss8440, {link: LinkFault(cut=True) for link in links})
    assert router_of(split).domain_count == 2
    # IPU 6 (card 3) to IPU 8 (card 4) now goes over PCIe: up to the switch fabric and down.
    assert labels(split, 6, 8) == ["s0.card3.ipu0 -> s0.card3 (pcie-gen3-x16)",
                                   "s0.card3 -> s0.pcie (pcie-gen3-x16)",
                                   "s0.pcie -> s0.card4 (pcie-gen3-x16)",
                                   "s0.card4 -> s0.card4.ipu0 (pcie-gen3-x16)"]
    assert send_seconds(split, 6, 8, 1e6) == pytest.approx(4 * TREE_HOP_SECONDS + 1e6 / PCIE_GEN3,
                                                           rel=1e-12)


def test_cuts_that_leave_two_ipus_no_path_raise_link_down_and_the_rest_still_route(ring8):
    # ring8 has no network outside its IPU-Links: two cuts make two separate chains.
    split = with_faults(ring8, {find_link(ring8, "ipu0--ipu1"): LinkFault(cut=True),
                                find_link(ring8, "ipu4--ipu5"): LinkFault(cut=True)})
    assert router_of(split).domain_count == 2
    with pytest.raises(LinkDown, match=r"IPU ipu0 -> IPU ipu2 has no path left.*ipu0--ipu1"):
        send_seconds(split, 0, 2, 1e6)
    assert send_seconds(split, 0, 5, 1e6) == pytest.approx(3 * A + 1e6 / B, rel=1e-12)


# -- cut tree links ---------------------------------------------------------------------

@pytest.mark.parametrize("link_text, kind", [("s0.host--ib-switch", "infiniband-100g"),
                                             ("s0.card0.ipu0--s0.card0", "pcie-gen3-x16")])
def test_a_cut_tree_link_stops_collectives_that_need_it_but_not_those_that_do_not(
        dss8440x2, link_text, kind):
    cut = faulted(dss8440x2, link_text, cut=True)
    for algorithm in ("clockwise_ring", "hierarchical", "auto"):
        with pytest.raises(LinkDown) as caught:
            allreduce_seconds(cut, 4 * MiB, algorithm)
        message = str(caught.value)
        assert f"link {link_text} ({kind}) is cut" in message
        assert " -> IPU " in message and "ipupod fault heal" in message
    # Server 1 needs neither link; server 0's IPUs stay on their IPU-Links.
    for ipus in (np.arange(16, 32), np.arange(16)):
        assert allreduce_seconds(cut, 4 * MiB, "auto", ipus) == allreduce_seconds(
            dss8440x2, 4 * MiB, "auto", ipus)


def test_link_down_is_a_schedule_error_and_faulted_topologies_build_without_spec_errors(
        ring8):
    assert issubclass(LinkDown, ScheduleError) and issubclass(LinkDown, UserError)
    assert not issubclass(LinkDown, SpecError)
    every = with_faults(ring8, {link: LinkFault(cut=True) for link in range(N)})
    assert router_of(every).domain_count == N


def test_a_cut_link_no_route_uses_changes_no_time():
    pod16 = load_topology("pod16")  # one IPU-Link domain: collectives never use the gateways
    cut = faulted(pod16, "r0.m0.ipu0--r0.m0.gw", cut=True)
    assert allreduce_seconds(cut, 16 * MiB) == allreduce_seconds(pod16, 16 * MiB)


# -- healing and the base topology -------------------------------------------------------

def test_no_faults_is_the_base_topology_itself(ring8):
    assert with_faults(ring8, {}) is ring8


def test_healing_gives_the_healthy_times_and_the_base_is_never_changed(dss8440x2):
    base = dss8440x2
    bandwidth = base.directed_bandwidth_Bps.copy()
    latency = base.directed_latency_seconds.copy()
    router = router_of(base)
    healthy = allreduce_seconds(base, 4 * MiB, "auto")
    rail = find_link(base, "s0.card2.ipu1--s0.card3.ipu1")
    ib = find_link(base, "s1.host--ib-switch")
    broken = with_faults(base, {rail: LinkFault(0.5, 1e-6), ib: LinkFault(cut=True)})
    assert sorted(broken.faults) == [rail, ib] and broken.cut_links == {ib}
    with pytest.raises(LinkDown):
        allreduce_seconds(broken, 4 * MiB, "auto")
    healed = with_faults(broken, {rail: LinkFault(), ib: LinkFault()})
    assert not healed.faults and not healed.cut_links
    assert allreduce_seconds(healed, 4 * MiB, "auto") == healthy
    assert np.array_equal(healed.directed_bandwidth_Bps, bandwidth)
    # The base: same router, same figures, no faults.
    assert router_of(base) is router and not base.faults and not base.cut_links
    assert np.array_equal(base.directed_bandwidth_Bps, bandwidth)
    assert np.array_equal(base.directed_latency_seconds, latency)
    assert allreduce_seconds(base, 4 * MiB, "auto") == healthy


def test_faults_given_again_replace_the_earlier_fault_on_that_link(ring8):
    link = find_link(ring8, "ipu2--ipu3")
    once = with_faults(ring8, {link: LinkFault(bandwidth_factor=0.5)})
    twice = with_faults(once, {link: LinkFault(bandwidth_factor=0.25)})
    assert send_seconds(twice, 2, 3, 1e6) == pytest.approx(A + 1e6 / (0.25 * B), rel=1e-12)


# -- naming links ------------------------------------------------------------------------

def test_links_are_found_by_their_two_nodes_in_either_order_or_by_index(dss8440x2):
    link = find_link(dss8440x2, "s0.card2.ipu1--s0.card3.ipu1")
    assert find_link(dss8440x2, "s0.card3.ipu1--s0.card2.ipu1") == link
    assert find_link(dss8440x2, f" {link} ") == link
    assert link_name(dss8440x2, link) == "s0.card2.ipu1--s0.card3.ipu1 (ipu-link-rail)"
    assert find_link(dss8440x2, link_name(dss8440x2, link)) == link


# -- bad input ---------------------------------------------------------------------------

@pytest.mark.parametrize("fault, words", [
    (dict(bandwidth_factor=0), "give cut=True"),
    (dict(bandwidth_factor=1.5), "at most 1"),
    (dict(bandwidth_factor=float("nan")), "more than 0 and at most 1"),
    (dict(added_latency_seconds=-1e-6), "0 or more"),
    (dict(added_latency_seconds=float("nan")), "finite"),
    (dict(added_latency_seconds=float("inf")), "finite"),
    (dict(cut="yes"), "True or False"),
])
def test_bad_fault_figures_are_refused_with_what_to_give_instead(fault, words):
    with pytest.raises(UserError, match=words):
        LinkFault(**fault)


def test_an_unknown_node_name_is_refused_with_close_names_and_where_to_list_links(dss8440x2):
    with pytest.raises(UserError) as caught:
        find_link(dss8440x2, "s0.card2.ipu9--s0.card3.ipu1")
    message = str(caught.value)
    assert "no node named 's0.card2.ipu9'" in message and "'s0.card2.ipu1'" in message
    assert "ipupod links" in message and "ipupod topology show SPEC" in message


def test_two_nodes_with_no_link_between_them_are_refused_with_the_first_nodes_links(
        dss8440x2):
    with pytest.raises(UserError) as caught:
        find_link(dss8440x2, "s0.card0.ipu0--s0.card5.ipu0")
    message = str(caught.value)
    assert "no link joins 's0.card0.ipu0' and 's0.card5.ipu0'" in message
    assert "s0.card0.ipu0--s0.card1.ipu0 (ipu-link-rail)" in message


@pytest.mark.parametrize("text", ["999", "ipu0", "ipu0--", "ipu0--ipu0"])
def test_unreadable_link_names_are_refused(ring8, text):
    with pytest.raises(UserError):
        find_link(ring8, text)


def test_with_faults_refuses_links_that_do_not_exist_and_faults_that_are_not_faults(ring8):
    with pytest.raises(UserError, match="links are numbered 0 to 7"):
        with_faults(ring8, {8: LinkFault(cut=True)})
    with pytest.raises(UserError, match="LinkFault"):
        with_faults(ring8, {0: 0.5})


def test_a_faulted_topology_pickles_with_its_faults(dss8440x2):
    # Real mode ships topologies to the device actors.
    cut = faulted(dss8440x2, "s0.card0.ipu0--s0.card1.ipu0", cut=True)
    copy = pickle.loads(pickle.dumps(cut))
    assert copy.faults == cut.faults and copy.cut_links == cut.cut_links
    assert send_seconds(copy, 0, 2, 1e6) == send_seconds(cut, 0, 2, 1e6)
