"""A topology's routes are a value derived from it: built by a pure function, kept one per
topology object, never changed once built, and holding no reference back to the topology.
The walks up the network tree that callers need are the tree's own methods."""

import dataclasses
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault, find_link
from cluster.model.presets import build_preset
from cluster.model.routing import build_router, router_of
from cluster.model.spec import load_topology

RING8 = Path(__file__).resolve().parent.parent / "examples" / "topologies" / "ring8.yaml"


def names(topology, nodes):
    return [topology.node_names[n] for n in nodes]


def test_a_topology_carries_no_router_field():
    topology = build_preset("dss8440")
    assert "router" not in {f.name for f in dataclasses.fields(topology)}
    assert not hasattr(topology, "router")


def test_router_of_gives_the_same_router_for_the_same_topology_and_another_for_a_copy():
    topology = build_preset("dss8440x2")
    assert router_of(topology) is router_of(topology)
    copy = dataclasses.replace(topology)
    assert router_of(copy) is not router_of(topology)
    assert router_of(copy).path(0, 16) == router_of(topology).path(0, 16)


def test_build_router_is_pure_and_routes_as_the_kept_router_does():
    topology = build_preset("dss8440x2")
    before = {f.name: getattr(topology, f.name) for f in dataclasses.fields(topology)}
    built = build_router(topology)
    assert built is not router_of(topology)
    for src, dst in [(0, 1), (0, 15), (3, 20), (31, 0)]:
        assert built.path(src, dst) == router_of(topology).path(src, dst)
    after = {f.name: getattr(topology, f.name) for f in dataclasses.fields(topology)}
    assert before.keys() == after.keys()
    assert all(before[k] is after[k] for k in before)


def test_a_router_cannot_be_changed():
    router = router_of(build_preset("dss8440x2"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        router.domain_count = 3  # type: ignore[misc]
    for array in (router.domain_of_ipu, router.tree.parent, router.tree.depth,
                  router.tree.up_link, router.tree.down_link, router.tree.root):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 7


def test_a_router_does_not_keep_its_topology_alive():
    topology = build_preset("dss8440")
    router = router_of(topology)
    gone = weakref.ref(topology)
    del topology
    gc.collect()
    assert gone() is None
    assert router.path(0, 1)  # the router still answers on its own


def test_a_faulted_topology_has_its_own_router_and_the_base_keeps_its_own():
    base = build_preset("dss8440")
    link = find_link(base, "s0.card0.ipu0--s0.card0.ipu1")
    cut = with_faults(base, {link: LinkFault(cut=True)})
    assert router_of(cut) is not router_of(base)
    assert 2 * link not in router_of(cut).path(0, 1)
    assert router_of(base).path(0, 1) in ([2 * link], [2 * link + 1])


def test_ancestors_walk_from_an_ipu_up_to_the_root_with_the_links_down():
    topology = build_preset("dss8440x2")
    above = list(router_of(topology).tree.ancestors(0))
    assert names(topology, [node for node, _ in above]) == [
        "s0.card0", "s0.pcie", "s0.host", "ib-switch"]
    assert [topology.link_label(link) for _, link in above] == [
        "s0.card0 -> s0.card0.ipu0 (pcie-gen3-x16)", "s0.pcie -> s0.card0 (pcie-gen3-x16)",
        "s0.host -> s0.pcie (pcie-gen3-x16)", "ib-switch -> s0.host (infiniband-100g)"]
    root = above[-1][0]
    assert list(router_of(topology).tree.ancestors(root)) == []


def test_ancestors_of_a_node_off_the_tree_are_none():
    ring = load_topology(str(RING8))  # IPU-Links only: no network tree
    assert list(router_of(ring).tree.ancestors(0)) == []
    assert router_of(ring).tree.nodes_above(range(ring.ipu_count)) == set()


def test_nodes_above_the_ipus_are_every_card_switch_and_host_between_them_and_the_root():
    topology = build_preset("dss8440x2")
    above = router_of(topology).tree.nodes_above(range(topology.ipu_count))
    assert sorted(names(topology, above)) == sorted(
        ["ib-switch", "s0.host", "s1.host", "s0.pcie", "s1.pcie"]
        + [f"s{s}.card{c}" for s in range(2) for c in range(8)])


def test_parents_first_lists_every_tree_node_after_its_parent():
    topology = build_preset("dss8440x2")
    tree = router_of(topology).tree
    nodes, parents = tree.parents_first()
    assert sorted(nodes.tolist()) == np.flatnonzero(tree.depth >= 0).tolist()
    place = {node: i for i, node in enumerate(nodes.tolist())}
    for node, parent in zip(nodes.tolist(), parents.tolist()):
        assert parent == tree.parent[node]
        assert parent < 0 or place[parent] < place[node]
    assert names(topology, nodes[:1]) == ["ib-switch"] and parents[0] == -1
