"""YAML topologies: the examples load as described, and every bad input is a SpecError."""

from __future__ import annotations

import copy
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from cluster.errors import SpecError
from cluster.model.routing import router_of
from cluster.model.topology_yaml import load_yaml_topology

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "topologies"
GB = 1e9


def ring_spec(n: int = 4) -> dict[str, Any]:
    """A small valid explicit graph: a ring of ``n`` IPUs plus a switched host."""
    return {
        "apiVersion": "ipupod/v1",
        "kind": "Topology",
        "metadata": {"name": f"ring{n}", "description": "test ring"},
        "spec": {
            "processor": "GC200",
            "linkTypes": [{"name": "ring-link", "bandwidth_GBps": 50, "latency_ns": 1000},
                          {"name": "net", "bandwidth_GBps": 12.5, "latency_ns": 1000}],
            "nodes": [{"name": "ipu", "kind": "ipu", "count": n},
                      {"name": "sw", "kind": "switch"},
                      {"name": "host", "kind": "host"}],
            "links": [{"from": "host", "to": "sw", "type": "net"}],
            "generators": [{"ring": "ipu", "type": "ring-link"},
                           {"star": "ipu", "center": "sw", "type": "net"}],
        },
    }


def preset_spec() -> dict[str, Any]:
    return {"apiVersion": "ipupod/v1", "kind": "Topology", "metadata": {"name": "p"},
            "spec": {"preset": "dss8440x2", "figures": "public",
                     "linkOverrides": {"infiniband-100g": {"latency_ns": 2000}},
                     "sync_ns": {"local": 100, "global": 1000}}}


def write(tmp_path: Path, data: Any, name: str = "topo.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(tmp_path: Path, data: Any) -> str:
    """Load ``data`` from a file and return the SpecError's message (which names the file)."""
    path = write(tmp_path, data)
    with pytest.raises(SpecError) as info:
        load_yaml_topology(path)
    message = str(info.value)
    assert str(path) in message
    return message


# -- the examples ---------------------------------------------------------------------


def test_ring8_is_eight_gc200_ipus_in_a_textbook_ring():
    topo = load_yaml_topology(EXAMPLES / "ring8.yaml")
    assert topo.name == "ring8"
    assert topo.ipu_count == topo.node_count == 8
    assert {p.name for p in topo.ipu_processors} == {"GC200"}
    assert [t.name for t in topo.link_types] == ["ring-link"]
    assert topo.link_types[0].bandwidth_Bps == 50 * GB
    assert topo.link_types[0].latency_seconds == 1000e-9
    assert topo.link_count_physical == 8 and (topo.link_count == 1).all()
    assert topo.sync_local_seconds == topo.sync_global_seconds == 0
    assert np.isinf(topo.ipu_memory_bandwidth_Bps).all()


def test_ring1024_file_is_small_and_describes_all_its_ipus():
    path = EXAMPLES / "ring1024.yaml"
    assert path.stat().st_size < 2000
    topo = load_yaml_topology(path)
    assert topo.ipu_count == 1024 and topo.link_count_physical == 1024
    assert topo.node_names[1023] == "ipu1023"
    routes = router_of(topo).route(np.array([1023]), np.array([0]))  # the wrap-around link
    assert len(routes.pair_link) == 1


def test_switch16_routes_every_transfer_up_and_down_through_the_switch():
    topo = load_yaml_topology(EXAMPLES / "switch16.yaml")
    assert topo.ipu_count == 16 and topo.node_count == 17
    assert [t.name for t in topo.link_types] == ["switch-link"]
    assert topo.link_types[0].bandwidth_Bps == 12.5 * GB
    routes = router_of(topo).route(np.array([0]), np.array([1]))
    assert len(routes.pair_link) == 2
    assert routes.latency_seconds[0] == pytest.approx(2000e-9)


def test_two_level_has_server_rings_and_one_private_switch_link_per_ipu():
    topo = load_yaml_topology(EXAMPLES / "two-level.yaml")
    assert topo.ipu_count == 16
    assert topo.node_names[:5] == ("s0.ipu0", "s0.ipu1", "s0.ipu2", "s0.ipu3", "s1.ipu0")
    assert sorted(t.name for t in topo.link_types) == ["network-link", "server-link"]
    switch = topo.node_names.index("sw")
    to_switch = (topo.link_a == switch) | (topo.link_b == switch)
    assert to_switch.sum() == 16 and (topo.link_count[to_switch] == 1).all()
    assert router_of(topo).domain_count == 4
    assert topo.ring_order.tolist() == list(range(16))
    inside = router_of(topo).route(np.array([0]), np.array([1]))
    assert len(inside.pair_link) == 1 and not inside.crosses_domains[0]
    across = router_of(topo).route(np.array([0]), np.array([4]))
    assert [topo.link_label(l) for l in across.pair_link] == [
        "s0.ipu0 -> sw (network-link)", "sw -> s1.ipu0 (network-link)"]
    assert [u.ipus for u in topo.units] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11),
                                            (12, 13, 14, 15)]
    assert [s.units for s in topo.servers] == [(0,), (1,), (2,), (3,)]


def test_dss8440x2_public_takes_public_figures_and_overrides_a_link():
    topo = load_yaml_topology(EXAMPLES / "dss8440x2-public.yaml")
    assert topo.name == "dss8440x2-public"
    assert topo.ipu_count == 32
    types = {t.name: t for t in topo.link_types}
    assert types["ipu-link-rail"].bandwidth_Bps == 128 * GB / 4  # public: 128 GB/s card to card
    assert types["infiniband-100g"].latency_seconds == pytest.approx(2000e-9)
    assert topo.ipu_processors[0].fp16_flops_per_second == 124.5e12


@pytest.mark.parametrize("name", ["ring8", "ring1024", "switch16", "two-level",
                                  "dss8440x2-public"])
def test_every_example_starts_with_a_comment_header(name):
    assert (EXAMPLES / f"{name}.yaml").read_text().startswith("# ")


# -- explicit graphs ------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_a_ring_routes_a_flow_between_neighbours_over_exactly_one_link(tmp_path, n):
    data = ring_spec(n)
    data["spec"]["links"] = []
    data["spec"]["generators"] = [{"ring": "ipu", "type": "ring-link"}]
    data["spec"]["nodes"] = data["spec"]["nodes"][:1]
    topo = load_yaml_topology(write(tmp_path, data))
    routes = router_of(topo).route(np.array([0]), np.array([1]))
    assert len(routes.pair_link) == 1
    assert routes.latency_seconds[0] == pytest.approx(1000e-9)


def test_a_ring_of_two_is_one_link_not_two_parallel_ones(tmp_path):
    data = ring_spec(2)
    data["spec"]["generators"] = [{"ring": "ipu", "type": "ring-link"}]
    data["spec"]["links"], data["spec"]["nodes"] = [], data["spec"]["nodes"][:1]
    topo = load_yaml_topology(write(tmp_path, data))
    assert topo.link_count_physical == 1 and topo.link_count.tolist() == [1]
    assert topo.directed_bandwidth_Bps.tolist() == [50 * GB, 50 * GB]


def test_a_chain_does_not_wrap_around(tmp_path):
    data = ring_spec(4)
    data["spec"]["generators"][0] = {"chain": "ipu", "type": "ring-link"}
    topo = load_yaml_topology(write(tmp_path, data))
    routes = router_of(topo).route(np.array([0]), np.array([3]))
    assert len(routes.pair_link) == 3


def test_explicit_links_counts_roles_processors_and_sync_are_applied(tmp_path):
    data = ring_spec(2)
    spec = data["spec"]
    spec["nodes"].append({"name": "old", "kind": "IPU", "processor": "gc2"})
    spec["links"] = [{"from": "host", "to": "sw", "type": "net", "role": "host"},
                     {"from": "ipu1", "to": "old", "type": "net", "count": 2}]
    spec["sync_ns"] = {"global": 2500}
    spec["memory_bandwidth_GBps"] = 10
    topo = load_yaml_topology(write(tmp_path, data))
    assert [p.name for p in topo.ipu_processors] == ["GC200", "GC200", "GC2"]
    old = topo.node_names.index("old")
    bundle = (topo.link_a == 1) & (topo.link_b == old)
    assert topo.link_count[bundle].tolist() == [2]
    assert topo.sync_global_seconds == pytest.approx(2.5e-6)
    assert topo.ipu_memory_bandwidth_Bps.tolist() == [10 * GB] * 3


def test_a_preset_file_takes_its_name_sync_and_memory_override(tmp_path):
    data = preset_spec()
    data["spec"]["memory_bandwidth_GBps"] = float("inf")
    topo = load_yaml_topology(write(tmp_path, data))
    assert topo.name == "p"
    assert topo.sync_local_seconds == pytest.approx(100e-9)
    assert topo.sync_global_seconds == pytest.approx(1000e-9)
    assert np.isinf(topo.ipu_memory_bandwidth_Bps).all()


# -- bad input ------------------------------------------------------------------------


def test_a_missing_file_is_a_spec_error_naming_it(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError, match="nope.yaml"):
        load_yaml_topology(path)


def test_a_file_that_is_not_yaml_names_the_line(tmp_path):
    message = load_error(tmp_path, "apiVersion: ipupod/v1\nkind: Topology\nspec: [a, b\n")
    assert "line 4" in message or "line 3" in message


def test_an_empty_file_is_a_spec_error(tmp_path):
    assert "empty" in load_error(tmp_path, "")


def test_a_key_given_twice_is_a_spec_error_not_a_silent_overwrite(tmp_path):
    text = yaml.safe_dump(ring_spec(), sort_keys=False) + "kind: Topology\n"
    assert "'kind' twice" in load_error(tmp_path, text)


def test_an_alias_bomb_is_refused_at_once_not_expanded(tmp_path):
    levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"{b}: &{b} [*{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}, *{a}]"
               for a, b in zip("abcdefgh", "bcdefghi")]
    text = "\n".join(levels) + "\napiVersion: ipupod/v1\nkind: Topology\nmetadata: {name: *i}\n"
    tracemalloc.start()
    try:
        message = load_error(tmp_path, text)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # expanded, it would be 9**9 = 387 million references (3 GB): refused, it is a few MB
    assert "alias" in message and peak_bytes < 64 << 20


@pytest.mark.parametrize("text, words", [
    ("spec: " + "[" * 5000 + "]" * 5000, ["nested too deeply"]),
    ("spec: {sync_ns: {local: 1" + "0" * 5000 + "}}", ["cannot be read", "ordinary size"]),
])
def test_hostile_nesting_and_numbers_are_spec_errors(tmp_path, text, words):
    message = load_error(tmp_path, "apiVersion: ipupod/v1\nkind: Topology\n" + text + "\n")
    assert all(word in message for word in words), message


def test_a_100_mb_topology_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(100 * 1024 * 1024)  # sparse: nothing written
    with pytest.raises(SpecError, match="104,857,600 bytes, over the 4,194,304-byte limit"):
        load_yaml_topology(path)


def mutate(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set (or with ``...`` delete) the field at a dotted path like ``spec.links.0.to``."""
    data = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    key: Any = int(last) if isinstance(node, list) else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return data


BAD_GRAPHS = [
    # (field to change, new value or ... to delete, words the message must contain)
    ("apiVersion", "ipupod/v2", ["apiVersion", "ipupod/v1", "ipupod/v2"]),
    ("apiVersion", ..., ["apiVersion", "ipupod/v1", "missing"]),
    ("kind", "Cluster", ["kind", "Topology"]),
    ("metadata", ..., ["metadata", "required"]),
    ("metadata.name", ..., ["metadata.name", "required"]),
    ("metadata.name", "", ["metadata.name"]),
    ("metadata.name", "a\nb\x1b[31mred", ["metadata.name", "printable text"]),
    ("metadata.name", "x" * 201, ["metadata.name", "at most 200 characters"]),
    ("spec.nodes.0.name", "i" * 200, ["spec.nodes[0].name", "0 to 3 after it", "shorten"]),
    ("metadata.labels", {"a": 1}, ["metadata.labels", "unknown field", "name, description"]),
    ("spec.linkTypes.0.bandwith_GBps", 5, ["spec.linkTypes[0].bandwith_GBps", "unknown field",
                                           "bandwidth_GBps"]),
    ("spec.linkTypes.0.latency_ns", ..., ["spec.linkTypes[0].latency_ns", "required"]),
    ("spec.linkTypes.0.bandwidth_GBps", 0, ["spec.linkTypes[0].bandwidth_GBps", "more than 0"]),
    ("spec.linkTypes.0.bandwidth_GBps", -5, ["spec.linkTypes[0].bandwidth_GBps"]),
    ("spec.linkTypes.0.bandwidth_GBps", "fast", ["spec.linkTypes[0].bandwidth_GBps", "number"]),
    ("spec.linkTypes.0.bandwidth_GBps", "1e9", ["bandwidth_GBps", "1.0e+9"]),
    ("spec.linkTypes.0.bandwidth_GBps", True, ["spec.linkTypes[0].bandwidth_GBps", "number"]),
    ("spec.linkTypes.0.bandwidth_GBps", float("inf"), ["bandwidth_GBps", "finite"]),
    ("spec.linkTypes.0.bandwidth_GBps", 1e308, ["bandwidth_GBps", "1e-09 to 1e+12"]),
    ("spec.linkTypes.0.bandwidth_GBps", 1e-320, ["bandwidth_GBps", "1e-09 to 1e+12"]),
    ("spec.linkTypes.0.bandwidth_GBps", 10**400, ["bandwidth_GBps", "too large", "1e+12"]),
    ("spec.linkTypes.0.latency_ns", 1e300, ["latency_ns", "0 to 1e+12"]),
    ("spec.nodes.0.count", 4097, ["spec.nodes[0].count", "4,096"]),
    ("spec.nodes.1.count", 4096, ["spec.nodes[1].count", "at most 4,096 nodes", "preset"]),
    ("spec.linkTypes.0.latency_ns", -1, ["spec.linkTypes[0].latency_ns", "0 or more"]),
    ("spec.linkTypes.0.latency_ns", float("nan"), ["spec.linkTypes[0].latency_ns"]),
    ("spec.linkTypes.1.name", "ring-link", ["spec.linkTypes[1].name", "twice"]),
    ("spec.links.0.type", "fibre", ["spec.links[0].type", "fibre", "ring-link, net"]),
    ("spec.links.0.to", "sw9", ["spec.links[0].to", "sw9", "nowhere", "'sw'"]),
    ("spec.links.0.from", 7, ["spec.links[0].from"]),
    ("spec.links.0.to", "host", ["spec.links[0].to", "itself"]),
    ("spec.links.0.count", 0, ["spec.links[0].count"]),
    ("spec.links.0.role", "data", ["spec.links[0].role", "fabric or host"]),
    ("spec.links.0.form", "x", ["spec.links[0].form", "unknown field"]),
    ("spec.links", {"from": "a"}, ["spec.links", "list"]),
    ("spec.nodes.1.name", "ipu", ["spec.nodes[1].name", "'ipu'", "already taken"]),
    ("spec.nodes.1.name", "ipu2", ["spec.nodes[1].name", "'ipu2'", "already taken"]),
    ("spec.nodes.0.count", 0, ["spec.nodes[0].count", "from 1"]),
    ("spec.nodes.0.count", -3, ["spec.nodes[0].count"]),
    ("spec.nodes.0.count", 2.5, ["spec.nodes[0].count", "whole number"]),
    ("spec.nodes.0.count", 10**9, ["spec.nodes[0].count"]),
    ("spec.nodes.0.kind", ..., ["spec.nodes[0].kind", "required"]),
    ("spec.nodes.1.processor", "GC200", ["spec.nodes[1].processor", "only IPUs"]),
    ("spec.nodes.0.processor", "GC3", ["spec.nodes[0].processor", "GC3", "GC2, GC200"]),
    ("spec.processor", ..., ["spec.nodes[0].processor", "spec.processor"]),
    ("spec.processor", ["GC2"], ["spec.processor"]),
    ("spec.nodes", [{"name": "sw", "kind": "switch"}], ["spec.nodes", "no node has kind 'ipu'"]),
    ("spec.nodes", ..., ["spec", "preset", "nodes"]),
    ("spec.node", [], ["spec.node", "unknown field"]),
    ("spec.linkOverrides", {}, ["spec.linkOverrides", "unknown field", "no spec.preset"]),
    ("spec.generators.0.ring", "gpu", ["spec.generators[0].ring", "gpu"]),
    ("spec.generators.0.chain", "ipu", ["spec.generators[0]", "exactly one"]),
    ("spec.generators.0.center", "sw", ["spec.generators[0].center", "only a star"]),
    ("spec.generators.1.center", ..., ["spec.generators[1].center", "missing"]),
    ("spec.generators.1.center", "ipu0", ["spec.generators[1].center", "own nodes"]),
    ("spec.generators.1.type", "wifi", ["spec.generators[1].type", "wifi"]),
    ("spec.sync_ns", {"locl": 5}, ["spec.sync_ns.locl", "local, global"]),
    ("spec.sync_ns", {"local": -5}, ["spec.sync_ns.local"]),
    ("spec.memory_bandwidth_GBps", 0, ["spec.memory_bandwidth_GBps"]),
    ("spec.figures", "private", ["spec.figures", "seed", "public"]),
    ("spec.ringOrder", ["ipu0", "ipu1", "ipu2"], ["spec.ringOrder", "'ipu3'", "every IPU"]),
    ("spec.ringOrder", ["ipu0", "ipu1", "ipu1", "ipu3"], ["spec.ringOrder[2]", "twice"]),
    ("spec.ringOrder", ["ipu0", "sw", "ipu2", "ipu3"], ["spec.ringOrder[1]", "not an IPU"]),
    ("spec.units", [{"name": "u", "kind": "card", "ipus": ["ipu0", "host"]}],
     ["spec.units[0].ipus[1]", "not an IPU"]),
    ("spec.units", [{"name": "u", "kind": "card", "ipus": ["ipu0"], "server": 2}],
     ["spec.units[0].server"]),
    ("spec.units", [{"name": "u", "kind": "card", "ipus": ["ipu0"]},
                    {"name": "v", "kind": "card", "ipus": ["ipu0"]}], ["spec.units[1].ipus"]),
    ("spec.servers", [{"name": "s"}], ["spec.servers[0].kind", "required"]),
]


@pytest.mark.parametrize("field,value,words", BAD_GRAPHS,
                         ids=[f"{f}={v!r}" for f, v, _ in BAD_GRAPHS])
def test_a_bad_graph_field_is_a_spec_error_naming_the_field(tmp_path, field, value, words):
    message = load_error(tmp_path, mutate(ring_spec(), field, value))
    for word in words:
        assert word in message, f"{word!r} not in: {message}"


BAD_PRESETS = [
    ("spec.preset", "dss9000", ["spec.preset", "dss9000", "pod16"]),
    ("spec.preset", "pod17", ["spec.preset", "17"]),
    ("spec.preset", "dss8440x0", ["spec.preset"]),
    ("spec.nodes", [], ["spec.nodes", "unknown field", "with spec.preset"]),
    ("spec.linkOverrides", {"warp-link": {"latency_ns": 5}}, ["spec.linkOverrides",
                                                               "warp-link"]),
    ("spec.linkOverrides", {"infiniband-100g": {}}, ["spec.linkOverrides.infiniband-100g"]),
    ("spec.linkOverrides", {"infiniband-100g": {"bandwidth_GBps": -1}},
     ["spec.linkOverrides.infiniband-100g.bandwidth_GBps"]),
    ("spec.linkOverrides", {"infiniband-100g": {"latency": 1}},
     ["spec.linkOverrides.infiniband-100g.latency", "latency_ns"]),
    ("spec.linkOverrides", ["infiniband-100g"], ["spec.linkOverrides", "mapping"]),
    ("spec.figures", "both", ["spec.figures"]),
]


@pytest.mark.parametrize("field,value,words", BAD_PRESETS,
                         ids=[f"{f}={v!r}" for f, v, _ in BAD_PRESETS])
def test_a_bad_preset_field_is_a_spec_error_naming_the_field(tmp_path, field, value, words):
    message = load_error(tmp_path, mutate(preset_spec(), field, value))
    for word in words:
        assert word in message, f"{word!r} not in: {message}"


def test_a_pair_joined_by_two_entries_is_a_spec_error_not_a_silent_bundle(tmp_path):
    data = ring_spec(4)
    data["spec"]["links"].append({"from": "ipu1", "to": "ipu0", "type": "ring-link"})
    message = load_error(tmp_path, data)
    for word in ["spec.links[1]", "'ipu0' and 'ipu1'", "spec.generators[0]", "count"]:
        assert word in message, f"{word!r} not in: {message}"


def test_an_unreachable_ipu_is_a_spec_error_naming_it(tmp_path):
    data = ring_spec(4)
    data["spec"]["nodes"].append({"name": "lonely", "kind": "ipu"})
    assert "'lonely'" in load_error(tmp_path, data)


def test_a_loop_in_the_network_is_a_spec_error(tmp_path):
    data = ring_spec(4)
    data["spec"]["links"].append({"from": "ipu0", "to": "host", "type": "net"})
    assert "loop" in load_error(tmp_path, data)


def leaves(data: Any, prefix: str = ""):
    """Every dotted path in a nested spec, for replacing each part with a wrong value."""
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for key, value in items:
        path = f"{prefix}{key}"
        yield path
        if isinstance(value, (dict, list)):
            yield from leaves(value, path + ".")


WRONG_VALUES = [None, [], {}, "x", -1, 0, 2.5, True, [1, 2], {"a": 1}]


@pytest.mark.parametrize("base", [ring_spec, preset_spec])
def test_any_wrong_value_anywhere_is_a_spec_error_never_a_raw_traceback(tmp_path, base):
    data = base()
    for path in leaves(data):
        for value in WRONG_VALUES:
            target = write(tmp_path, mutate(data, path, value))
            try:
                load_yaml_topology(target)
            except SpecError as err:
                assert str(target) in str(err)
