"""Tests of ``cluster.model.topology_show``: summaries, text/JSON renderings, bisection
bandwidth (the DOT drawing: test_rack_drawing.py).

Expected numbers are worked out by hand from docs/hardware.md and the preset docstrings
(cluster/presets/dss8440.py, cluster/presets/ipu_pod.py); the derivations are in comments.
"""

from __future__ import annotations

import json
import re

import pytest

from cluster.model import hardware as hw
from cluster.model.builder import TopologyBuilder
from cluster.model.presets import build_preset
from cluster.model.routing import router_of
from cluster.model.topology import Topology
from cluster.model.topology_show import (
    bisection_bandwidth_Bps,
    render_json,
    render_text,
    summarize,
)

# PCIe Gen3 x16: 8 GT/s x 16 lanes x 128/130 coding / 8 bits = 15.7538... GB/s each way.
PCIE_GEN3_GBPS = 8 * 16 * 128 / 130 / 8


@pytest.fixture(scope="module")
def dss8440() -> Topology:
    return build_preset("dss8440")


def _link(summary: dict, name: str) -> dict:
    (record,) = [r for r in summary["links"] if r["type"] == name]
    return record


def _strip_quoted(text: str) -> str:
    """DOT text with its double-quoted strings (escapes included) removed."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


# -- summarize -----------------------------------------------------------------------------

def test_dss8440_summary_counts_ipus_cards_server_and_nodes(dss8440: Topology) -> None:
    # Eight C2 cards of two GC2 IPUs in one server; one node per card (its PCIe endpoint),
    # the PCIe switch fabric drawn as one node, one host.
    s = summarize(dss8440)
    assert s["name"] == "dss8440"
    assert s["ipus"] == 16
    assert s["processors"] == {"GC2": 16}
    assert s["units"] == {"C2": 8}
    assert s["servers"] == {"DSS 8440": 1}
    assert s["ipu_link_domains"] == 1
    assert s["nodes"] == {"ipu": 16, "card": 8, "pcie-switch": 1, "host": 1}


def test_dss8440_links_are_rungs_rails_and_pcie_with_their_speeds(dss8440: Topology) -> None:
    s = summarize(dss8440)
    assert [r["type"] for r in s["links"]] == ["ipu-link-rung", "ipu-link-rail", "pcie-gen3-x16"]
    # One rung per card: 192 GB/s bidirectional -> 96 GB/s each way.
    assert _link(s, "ipu-link-rung") == {
        "type": "ipu-link-rung", "count": 8, "bundles": 8,
        "bandwidth_GBps_per_direction": 96.0, "latency_ns": 300.0, "role": "fabric"}
    # Two rails between each of the 7 neighbouring card pairs; 256 GB/s bidirectional over
    # two rails -> 64 GB/s each way per rail.
    assert _link(s, "ipu-link-rail") == {
        "type": "ipu-link-rail", "count": 14, "bundles": 14,
        "bandwidth_GBps_per_direction": 64.0, "latency_ns": 300.0, "role": "fabric"}
    # 16 IPU-to-card + 8 card-to-switch + a bundle of 4 switch-to-host uplinks:
    # 28 links in 25 bundles.
    pcie = _link(s, "pcie-gen3-x16")
    assert (pcie["count"], pcie["bundles"]) == (28, 25)
    assert pcie["bandwidth_GBps_per_direction"] == pytest.approx(PCIE_GEN3_GBPS, rel=1e-11)
    assert pcie["latency_ns"] == 1000.0


def test_summary_sync_costs_are_in_nanoseconds(dss8440: Topology) -> None:
    assert summarize(dss8440)["sync_ns"] == {"local": 500.0, "global": 5000.0}


def test_dss8440x2_has_two_domains_and_two_infiniband_adapters_per_host() -> None:
    s = summarize(build_preset("dss8440x2"))
    assert s["ipus"] == 32
    assert s["units"] == {"C2": 16}
    assert s["servers"] == {"DSS 8440": 2}
    assert s["ipu_link_domains"] == 2
    assert s["nodes"]["ib-switch"] == 1
    assert _link(s, "infiniband-100g") == {
        "type": "infiniband-100g", "count": 4, "bundles": 2,
        "bandwidth_GBps_per_direction": 12.5, "latency_ns": 1000.0, "role": "fabric"}


def test_pod64_summary_counts_sixteen_m2000s_in_one_rack() -> None:
    s = summarize(build_preset("pod64"))
    assert s["ipus"] == 64
    assert s["processors"] == {"GC200": 64}
    assert s["units"] == {"IPU-M2000": 16}
    assert s["servers"] == {"IPU-POD64": 1}
    assert s["ipu_link_domains"] == 1
    assert s["nodes"] == {"ipu": 64, "gateway": 16, "host": 1}
    # Ladder 2 wide, 32 rows, closed into a ring: 32 rungs + 2 x 32 rails = 96 IPU-Links.
    assert _link(s, "ipu-link")["count"] == 96
    assert _link(s, "ipu-link")["bandwidth_GBps_per_direction"] == 32.0
    assert _link(s, "pcie-gen4-x16")["count"] == 64
    assert _link(s, "host-roce-100g")["role"] == "host"


def test_pod128_gw_links_are_two_per_machine() -> None:
    s = summarize(build_preset("pod128"))
    assert s["ipu_link_domains"] == 2
    assert _link(s, "gw-link-100g") == {
        "type": "gw-link-100g", "count": 64, "bundles": 32,
        "bandwidth_GBps_per_direction": 12.5, "latency_ns": 1000.0, "role": "fabric"}


# -- bisection bandwidth -------------------------------------------------------------------

def test_dss8440_bisection_is_128_GBps_limited_by_the_middle_rails(dss8440: Topology) -> None:
    # Ring 0, 2, ..., 14, 15, 13, ..., 1: the first half is rail column 0, the second column 1,
    # and position p -> p + 8 pairs card c (IPU 0) with card 7 - c (IPU 1). Every flow
    # crosses the middle of the ladder (between cards 3 and 4). The router sends the four
    # climbing flows (c = 0..3) up column 0 and the four descending ones (c = 4..7) down
    # column 1, so each middle rail direction carries 4 flows: 64 / 4 = 16 GB/s each.
    # Rungs (cards 4..7, two flows each, 48 GB/s shares) do not bind: 8 x 16 = 128 GB/s.
    ring = dss8440.ring_order
    routes = router_of(dss8440).route(ring[:8], ring[8:])
    labels = [dss8440.link_label(int(l)) for l in routes.pair_link]
    assert labels.count("s0.card3.ipu0 -> s0.card4.ipu0 (ipu-link-rail)") == 4
    assert labels.count("s0.card4.ipu1 -> s0.card3.ipu1 (ipu-link-rail)") == 4
    assert bisection_bandwidth_Bps(dss8440) == pytest.approx(128e9, rel=1e-12)
    assert summarize(dss8440)["bisection_bandwidth_GBps"] == 128.0


def test_dss8440x2_bisection_is_the_infiniband_bundle() -> None:
    # Server 0's 16 IPUs send to server 1's over the host's 2 x 12.5 GB/s InfiniBand bundle:
    # 25 / 16 = 1.5625 GB/s each, below every PCIe share (63 / 16, 15.75 / 2): 25 GB/s.
    assert summarize(build_preset("dss8440x2"))["bisection_bandwidth_GBps"] == 25.0


def test_pod128_bisection_is_sixteen_gw_link_bundles() -> None:
    # Ring halves are the two racks; IPU j of rack 0 sends to IPU j of rack 1. Each flow
    # climbs PCIe Gen4 (32 GB/s, alone) to its M2000's gateway, whose GW-Link bundle
    # (2 x 12.5 = 25 GB/s) it shares with the machine's other 3 IPUs: 6.25 GB/s; the
    # receiving gateway's bundle has the same 4 flows. 64 flows x 6.25 = 16 x 25 = 400 GB/s.
    assert summarize(build_preset("pod128"))["bisection_bandwidth_GBps"] == 400.0


def test_pod65536_summarises_with_its_bisection() -> None:
    # 512 racks x 16 M2000s send, each through one 25 GB/s GW-Link bundle: 204,800 GB/s.
    topology = build_preset("pod65536")
    s = summarize(topology)
    assert s["ipus"] == 65536
    assert s["units"] == {"IPU-M2000": 16384}
    assert s["ipu_link_domains"] == 1024
    assert s["bisection_bandwidth_GBps"] == 204800.0


def test_a_single_ipu_has_zero_bisection_bandwidth() -> None:
    b = TopologyBuilder("solo")
    b.add_ipus(["solo.ipu0"], hw.gc200())
    s = summarize(b.build())
    assert s["bisection_bandwidth_GBps"] == 0.0
    assert s["links"] == []
    assert "none" in render_text(s)


def test_an_odd_ring_leaves_its_last_ipu_out_of_the_bisection() -> None:
    # Chain a - b - c of 32 GB/s IPU-Links: h = 1, one flow a -> b over one link.
    b = TopologyBuilder("chain3")
    ipus = b.add_ipus(["a", "b", "c"], hw.gc200())
    b.add_links(ipus[:-1], ipus[1:], hw.ipu_link_mk2())
    assert summarize(b.build())["bisection_bandwidth_GBps"] == 32.0


# -- text and JSON -------------------------------------------------------------------------

def test_text_shows_the_facts_and_an_aligned_links_table(dss8440: Topology) -> None:
    text = render_text(summarize(dss8440))
    assert text.startswith("Topology dss8440\n")
    assert re.search(r"IPUs\s+16 \(GC2\)", text)
    assert re.search(r"units\s+8 C2", text)
    assert re.search(r"bisection bandwidth\s+128 GB/s", text)
    table = text.split("Links\n", 1)[1].splitlines()
    assert table[0].split() == ["type", "count", "bundles", "GB/s", "per", "direction",
                                "latency", "role"]
    assert table[1].split() == ["ipu-link-rung", "8", "8", "96", "300", "ns", "fabric"]
    assert table[3].split() == ["pcie-gen3-x16", "28", "25", "15.7538", "1", "us", "fabric"]
    # Right-aligned numeric columns and a left-aligned role column line up.
    for column in ("count", "latency"):
        end = table[0].index(column) + len(column)
        assert all(line[end - 1] != " " and line[end:end + 1] in ("", " ") for line in table)
    role = table[0].index("role")
    assert all(line[role:].strip() == "fabric" for line in table[1:])


def test_json_parses_back_to_the_summary() -> None:
    s = summarize(build_preset("dss8440x2"))
    assert json.loads(render_json(s)) == s
