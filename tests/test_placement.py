"""Placement rules on a Ray cluster of several nodes, without Ray: which PODs are refused
before anything starts, where links listen, which address each device uses for each peer,
and how a lost node's devices are named. (On a real three-node cluster:
tests/test_ray_multinode.py.)"""

import pytest

from cluster.errors import UserError
from cluster.model.spec import load_topology
from ipu_node.device_spec import device_specs
from ipu_node.node_loss import devices_phrase, loss_notes, name_range
from ipu_node.node_placement import (
    NODE_ADDRESS,
    RayNode,
    check_servers_fit,
    link_host_for,
    peer_addresses,
    strategy,
)


def nodes(*ipus: float) -> list[RayNode]:
    return [RayNode(f"{i:02x}" * 28, f"10.0.0.{i + 1}", count) for i, count in enumerate(ipus)]


def test_a_server_bigger_than_every_node_is_refused_with_what_to_do():
    specs = device_specs(load_topology("dss8440x2"))
    with pytest.raises(UserError) as refused:
        check_servers_fit(specs, nodes(0, 8, 4), allow_split_server=False)
    assert str(refused.value) == (
        "server s0 needs 16 IPU resources (8 cards) on one Ray node; the largest of the 3 "
        "nodes offers 8: add a node with --resources '{\"IPU\": 16}' or pass "
        "--allow-split-server (its IPU-Links then cross the network)")


def test_servers_that_each_fit_a_node_or_an_allowed_split_pass():
    specs = device_specs(load_topology("dss8440x2"))
    check_servers_fit(specs, nodes(0, 16, 16), allow_split_server=False)
    check_servers_fit(specs, nodes(8, 8, 8, 8), allow_split_server=True)
    assert strategy(False) == "STRICT_PACK" and strategy(True) == "PACK"


def test_a_rack_of_machines_is_named_as_a_rack():
    with pytest.raises(UserError, match=r"^rack r0 needs 64 IPU resources \(16 IPU-M2000s\)"):
        check_servers_fit(device_specs(load_topology("pod64")), nodes(16, 16), False)


def test_links_listen_on_the_node_address_only_when_there_are_several_nodes():
    assert link_host_for("127.0.0.1", nodes(256)) == "127.0.0.1"  # today's single node
    assert link_host_for("127.0.0.1", nodes(16, 16)) == NODE_ADDRESS
    assert link_host_for("10.1.2.3", nodes(16, 16)) == "10.1.2.3"  # the user's choice


def test_peers_on_another_node_are_reached_over_tcp_on_its_address():
    seen = peer_addresses(["a", "a", "b"], ["10.0.0.1:5", "10.0.0.1:6", "10.0.0.2:7"],
                          ["unix:/x", "unix:/y", "unix:/z"])
    assert seen == [["unix:/x", "unix:/y", "10.0.0.2:7"],
                    ["unix:/x", "unix:/y", "10.0.0.2:7"],
                    ["10.0.0.1:5", "10.0.0.1:6", "unix:/z"]]


def test_a_lost_node_names_its_devices_in_ranges():
    specs = [s for s in device_specs(load_topology("dss8440x2")) if s.server == "s1"]
    assert devices_phrase(specs) == "cards s1.card0..s1.card7; host s1.host"
    assert name_range(["s1.card0", "s1.card2"]) == "s1.card0, s1.card2"
    assert name_range(["r0.m3", "r0.m4", "r0.m6"]) == "r0.m3, r0.m4, r0.m6"


def test_on_a_single_node_no_node_is_ever_named_lost():
    specs = device_specs(load_topology("dss8440x2"))
    assert loss_notes(specs, ["a"] * len(specs), ["10.0.0.1"] * len(specs), [0, 1]) == {}
