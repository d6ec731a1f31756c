"""Presets build the documented hardware; routes take IPU-Links inside a domain and the
network tree across domains; bad specs fail with a message that names the problem."""

import numpy as np
import pytest

from cluster.errors import SpecError
from cluster.model.builder import TopologyBuilder
from cluster.model.hardware import FigureChoice, LinkType, gc2, gc200
from cluster.model.presets import LinkOverride, PresetOptions, build_preset
from cluster.model.routing import router_of


def route_labels(topology, src, dst):
    return [topology.link_label(link) for link in router_of(topology).path(src, dst)]


def test_dss8440_is_eight_c2_cards_of_two_gc2_ipus_on_a_ladder():
    topology = build_preset("dss8440")
    assert topology.ipu_count == 16
    assert [u.kind for u in topology.units] == ["C2"] * 8
    assert {p.name for p in topology.ipu_processors} == {"GC2"}
    types = {t.name: t for t in topology.link_types}
    assert types["ipu-link-rung"].bandwidth_Bps == 96e9  # 192 GB/s bidirectional
    assert types["ipu-link-rail"].bandwidth_Bps == 64e9  # 256 GB/s per card pair, 2 rails
    assert router_of(topology).domain_count == 1
    assert topology.ring_order.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 15, 13, 11, 9, 7, 5, 3, 1]


def test_public_figures_halve_the_card_to_card_bandwidth():
    topology = build_preset("dss8440", PresetOptions(figures=FigureChoice.all_from("public")))
    rail = next(t for t in topology.link_types if t.name == "ipu-link-rail")
    assert rail.bandwidth_Bps == 32e9
    assert gc2(FigureChoice.all_from("public")).fp16_flops_per_second == 124.5e12
    assert gc2().fp16_flops_per_second == 100e12


def test_ring_hops_on_the_ladder_are_single_ipu_links():
    topology = build_preset("dss8440")
    ring = topology.ring_order
    routes = router_of(topology).route(ring, np.roll(ring, -1))
    assert len(routes.pair_link) == 16


def test_route_between_servers_climbs_pcie_and_crosses_infiniband():
    topology = build_preset("dss8440x2")
    assert route_labels(topology, 1, 17) == [
        "s0.card0.ipu1 -> s0.card0 (pcie-gen3-x16)",
        "s0.card0 -> s0.pcie (pcie-gen3-x16)",
        "s0.pcie -> s0.host (pcie-gen3-x16)",
        "s0.host -> ib-switch (infiniband-100g)",
        "ib-switch -> s1.host (infiniband-100g)",
        "s1.host -> s1.pcie (pcie-gen3-x16)",
        "s1.pcie -> s1.card0 (pcie-gen3-x16)",
        "s1.card0 -> s1.card0.ipu1 (pcie-gen3-x16)",
    ]


def test_two_infiniband_adapters_are_one_bundle_of_twice_the_bandwidth():
    topology = build_preset("dss8440x2")
    ib = topology.link_types.index(next(t for t in topology.link_types
                                        if t.name == "infiniband-100g"))
    bundles = np.flatnonzero(topology.link_type == ib)
    assert topology.link_count[bundles].tolist() == [2, 2]
    assert set(topology.directed_bandwidth_Bps[2 * bundles].tolist()) == {25e9}


def test_pod_racks_are_joined_through_gw_links():
    topology = build_preset("pod128")
    labels = route_labels(topology, 0, 64)
    assert [label.split("(")[1] for label in labels] == [
        "pcie-gen4-x16)", "gw-link-100g)", "gw-link-100g)", "pcie-gen4-x16)"]
    assert router_of(topology).domain_count == 2
    assert len(topology.units) == 32 and topology.units[0].kind == "IPU-M2000"


def test_pod64_is_one_ipu_link_domain_of_sixteen_m2000s():
    topology = build_preset("pod64")
    assert topology.ipu_count == 64 and len(topology.units) == 16
    assert router_of(topology).domain_count == 1
    assert {p.name for p in topology.ipu_processors} == {"GC200"}


def test_largest_pod_builds():
    topology = build_preset("pod65536")
    assert topology.ipu_count == 65536
    assert router_of(topology).domain_count == 1024


@pytest.mark.parametrize("spec, words", [
    ("pod17", "power-of-two"),
    ("pod8", "power-of-two"),
    ("pod131072", "power-of-two"),
    ("dss8440x0", "1 to"),
    ("dgx", "unknown topology"),
])
def test_invalid_presets_say_what_is_wrong(spec, words):
    with pytest.raises(SpecError, match=words):
        build_preset(spec)


def test_link_overrides_change_one_link_type():
    options = PresetOptions(link_overrides=(("infiniband-100g", LinkOverride(latency_ns=2500)),))
    topology = build_preset("dss8440x2", options)
    ib = next(t for t in topology.link_types if t.name == "infiniband-100g")
    assert ib.latency_seconds == pytest.approx(2.5e-6)


def test_an_override_for_a_missing_link_type_is_refused():
    options = PresetOptions(link_overrides=(("gw-link-100g", LinkOverride(latency_ns=1)),))
    with pytest.raises(SpecError, match="no link type 'gw-link-100g'"):
        build_preset("dss8440", options)


def test_negative_bandwidth_is_refused():
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        LinkType("x", 1e9, 0, "t").with_overrides(bandwidth_Bps=-1)


def _two_islands():
    b = TopologyBuilder("islands")
    ipus = b.add_ipus(["a", "b", "c", "d"], gc200())
    fast = LinkType("l", 1e9, 0, "t")
    b.add_links([ipus[0], ipus[2]], [ipus[1], ipus[3]], fast)
    return b, ipus, fast


def test_an_unreachable_ipu_is_named():
    b, _, _ = _two_islands()
    with pytest.raises(SpecError, match="cannot reach"):
        b.build()


def test_a_loop_in_the_network_tree_is_refused():
    b, ipus, fast = _two_islands()
    switches = b.add_nodes(["s1", "s2"], "switch")
    b.add_links(ipus, [switches[0], switches[0], switches[1], switches[1]], fast)
    b.add_links([switches[0], switches[0]], [switches[1], switches[1]], fast)  # a bundle: fine
    b.build()
    b.add_links([ipus[0]], [switches[1]], fast)  # a second way up: a loop
    with pytest.raises(SpecError, match="loop"):
        b.build()


def test_duplicate_names_and_self_links_are_refused():
    b = TopologyBuilder("dup")
    b.add_ipus(["x", "x"], gc200())
    with pytest.raises(SpecError, match="two nodes are named 'x'"):
        b.build()
    b = TopologyBuilder("self")
    ipus = b.add_ipus(["x", "y"], gc200())
    b.add_links([ipus[0]], [ipus[0]], LinkType("l", 1e9, 0, "t"))
    with pytest.raises(SpecError, match="to itself"):
        b.build()


def test_a_pod32_is_one_rack_of_eight_m2000s_labelled_as_such():
    topology = build_preset("pod32")
    assert len(topology.units) == 8 and topology.servers[0].kind == "IPU-POD32"
