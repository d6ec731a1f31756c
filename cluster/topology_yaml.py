"""Topologies from YAML files: :func:`load_yaml_topology` reads an ``ipupod/v1`` file.

A file either names a preset (``spec.preset``, with figure choices, link overrides and sync
costs) or describes a graph: link types, node groups, links and generators (ring, chain,
star) that expand into links. See ``examples/topologies/`` for one of each. Bandwidths are
decimal GB/s per direction, latencies and sync costs nanoseconds; everything is converted
to bytes per second and seconds here. Any mistake raises :class:`SpecError` naming the file,
the field path (``spec.links[3].to``) and what to change: never a raw traceback.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import Any, NoReturn

import numpy as np
import yaml

from cluster import hardware as hw
from cluster.errors import SpecError, UserError
from cluster.presets import LinkOverride, PresetOptions, build_preset
from cluster.topology import FABRIC, ROLES, Server, Topology, TopologyBuilder, Unit

API_VERSIONS = ("ipupod/v1",)
KIND = "Topology"
MAX_COUNT = 1 << 20  # nodes in one group: a typo like 10000000 should fail, not eat memory
_COMMON = ("figures", "sync_ns", "memory_bandwidth_GBps")
_PRESET_FIELDS = ("preset",) + _COMMON + ("linkOverrides",)
_GRAPH_FIELDS = _COMMON + ("processor", "linkTypes", "nodes", "links", "generators",
                           "ringOrder", "units", "servers")
_SHAPES = ("ring", "chain", "star")


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key given twice in one mapping is an error
    (PyYAML would silently keep the last one, e.g. drop a whole ``links:`` list)."""


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark,
                    f"found the key {key!r} twice; keep one", key_node.start_mark)
            seen.add(key)
    yield from yaml.SafeLoader.construct_yaml_map(loader, node)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


class _Reader:
    """Checks the parsed file field by field; every failure names the file and field path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, problem: str) -> NoReturn:
        raise SpecError(f"{self.file}: {path or 'top level'}: {problem}")

    def fields(self, value: Any, path: str, required: tuple[str, ...],
               optional: tuple[str, ...] = (), note: str = "") -> dict[str, Any]:
        """A mapping with all of ``required`` and nothing outside ``required + optional``."""
        allowed = ", ".join(required + optional)
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping with the fields {allowed}, got {value!r}")
        for key in value:
            if key not in required + optional:
                self.fail(_join(path, key), f"unknown field{note}; allowed here: {allowed}")
        for key in required:
            if key not in value:
                self.fail(_join(path, key), "missing: this field is required")
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list (one '- ' entry per item), got {value!r}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(path, f"expected a non-empty text, got {value!r}")
        return value

    def number(self, value: Any, path: str, positive: bool = False, inf: bool = False) -> float:
        """A real number, 0 or more (more than 0 if ``positive``); infinite only if ``inf``."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = ""
            if isinstance(value, str) and _is_float(value):
                hint = " (PyYAML reads 1e9 as text: write 1.0e+9, or quote nothing)"
            self.fail(path, f"expected a number, got {value!r}{hint}")
        x = float(value)
        if math.isnan(x) or (math.isinf(x) and not inf):
            self.fail(path, f"expected a finite number, got {value!r}")
        if positive and not x > 0:
            self.fail(path, f"must be more than 0, got {value!r}")
        if x < 0:
            self.fail(path, f"must be 0 or more, got {value!r}")
        return x

    def count(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected a whole number, got {value!r}")
        if not 1 <= value <= MAX_COUNT:
            self.fail(path, f"must be from 1 to {MAX_COUNT:,}, got {value}")
        return value

    def choice(self, value: Any, path: str, choices: dict[str, Any]) -> Any:
        if not isinstance(value, str) or value.upper() not in choices:
            self.fail(path, f"{value!r} is not one of {', '.join(choices)}")
        return choices[value.upper()]

    def node(self, value: Any, path: str, ids: dict[str, int]) -> int:
        name = self.string(value, path)
        if name not in ids:
            close = difflib.get_close_matches(name, list(ids), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.fail(path, f"no node is named {name!r}{hint}: a link to nowhere; declare it "
                            "under spec.nodes or fix the name")
        return ids[name]


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_yaml_topology(path: str | os.PathLike[str]) -> Topology:
    """Read an ``ipupod/v1`` topology file and build it (routes included)."""
    file = os.fspath(path)
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"{file}: cannot read the topology file ({err}); check the path") from err
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"{file}: not valid YAML{where}: {problem}; fix the syntax there") from err
    r = _Reader(file)
    if data is None:
        r.fail("", "the file is empty; see examples/topologies/ for the format")
    if not isinstance(data, dict):
        r.fail("", f"expected a mapping with apiVersion, kind, metadata and spec, got {data!r}")
    if data.get("apiVersion") not in API_VERSIONS:
        got = f"got {data['apiVersion']!r}" if "apiVersion" in data else "it is missing"
        r.fail("apiVersion", f"supported versions: {', '.join(API_VERSIONS)} ({got})")
    top = r.fields(data, "", ("apiVersion", "kind", "metadata", "spec"))
    if top["kind"] != KIND:
        r.fail("kind", f"must be {KIND!r}, got {top['kind']!r}")
    metadata = r.fields(top["metadata"], "metadata", ("name",), ("description",))
    name = r.string(metadata["name"], "metadata.name")
    if "description" in metadata and not isinstance(metadata["description"], str):
        r.fail("metadata.description", f"expected text, got {metadata['description']!r}")
    spec = top["spec"]
    if isinstance(spec, dict) and "preset" in spec:
        return _load_preset(r, spec, name)
    if isinstance(spec, dict) and "nodes" not in spec:
        r.fields(spec, "spec", (), ("preset",) + _GRAPH_FIELDS)  # a typo first, if any
        r.fail("spec", "give either 'preset' (a preset name) or 'nodes' (an explicit graph)")
    return _load_graph(r, spec, name)


def _common(r: _Reader, spec: dict[str, Any]) -> tuple[
        hw.FigureChoice, float | None, float | None, float | None]:
    """Figures, sync costs (s) and memory bandwidth override (B/s), shared by both forms."""
    figures = hw.SEED_FIGURES
    if "figures" in spec:
        try:
            figures = hw.FigureChoice.all_from(spec["figures"])
        except UserError as err:
            r.fail("spec.figures", str(err))
    local = glob = memory = None
    if "sync_ns" in spec:
        sync = r.fields(spec["sync_ns"], "spec.sync_ns", (), ("local", "global"))
        if "local" in sync:
            local = r.number(sync["local"], "spec.sync_ns.local") / 1e9
        if "global" in sync:
            glob = r.number(sync["global"], "spec.sync_ns.global") / 1e9
    if "memory_bandwidth_GBps" in spec:
        memory = r.number(spec["memory_bandwidth_GBps"], "spec.memory_bandwidth_GBps",
                          positive=True, inf=True) * 1e9
    return figures, local, glob, memory


def _load_preset(r: _Reader, spec: dict[str, Any], name: str) -> Topology:
    spec = r.fields(spec, "spec", ("preset",), _PRESET_FIELDS[1:], " with spec.preset")
    preset = r.string(spec["preset"], "spec.preset")
    figures, local, glob, memory = _common(r, spec)
    overrides = []
    given = {} if spec.get("linkOverrides") is None else spec["linkOverrides"]
    if not isinstance(given, dict):
        r.fail("spec.linkOverrides", f"expected a mapping of link type names, got {given!r}")
    for link_name, override in given.items():
        path = f"spec.linkOverrides.{link_name}"
        fields = r.fields(override, path, (), ("bandwidth_GBps", "latency_ns"))
        if not fields:
            r.fail(path, "give bandwidth_GBps, latency_ns or both")
        bandwidth = fields.get("bandwidth_GBps")
        latency = fields.get("latency_ns")
        overrides.append((str(link_name), LinkOverride(
            None if bandwidth is None else r.number(bandwidth, f"{path}.bandwidth_GBps", True),
            None if latency is None else r.number(latency, f"{path}.latency_ns"))))
    options = PresetOptions(figures, tuple(overrides), local, glob)
    try:
        topology = build_preset(preset, options)
    except UserError as err:  # pod sizes raise UserError, the rest SpecError
        field = "spec.linkOverrides" if "has no link type" in str(err) else "spec.preset"
        r.fail(field, str(err))
    topology.name = name
    if memory is not None:  # before any use: ipu_memory_bandwidth_Bps is cached on first use
        topology.memory_bandwidth_override_Bps = memory
    return topology


def _load_graph(r: _Reader, spec: Any, name: str) -> Topology:
    spec = r.fields(spec, "spec", ("nodes",), _GRAPH_FIELDS, " in a graph (no spec.preset)")
    figures, local, glob, memory = _common(r, spec)
    processors = {"GC2": hw.gc2(figures), "GC200": hw.gc200()}
    default = (r.choice(spec["processor"], "spec.processor", processors)
               if "processor" in spec else None)
    types: dict[str, hw.LinkType] = {}
    for i, entry in enumerate(r.items(spec.get("linkTypes"), "spec.linkTypes")):
        path = f"spec.linkTypes[{i}]"
        entry = r.fields(entry, path, ("name", "bandwidth_GBps", "latency_ns"))
        type_name = r.string(entry["name"], f"{path}.name")
        if type_name in types:
            r.fail(f"{path}.name", f"link type {type_name!r} is declared twice; rename one")
        types[type_name] = hw.LinkType(
            type_name, r.number(entry["bandwidth_GBps"], f"{path}.bandwidth_GBps", True) * 1e9,
            r.number(entry["latency_ns"], f"{path}.latency_ns") / 1e9, f"YAML {r.file}")

    b = TopologyBuilder(name)
    groups: dict[str, np.ndarray] = {}  # node group name -> builder ids
    ids: dict[str, int] = {}  # node name -> builder id
    ipus: set[int] = set()
    for i, entry in enumerate(r.items(spec["nodes"], "spec.nodes")):
        path = f"spec.nodes[{i}]"
        entry = r.fields(entry, path, ("name", "kind"), ("count", "processor"))
        group, kind = r.string(entry["name"], f"{path}.name"), r.string(entry["kind"], f"{path}.kind")
        names = ([f"{group}{k}" for k in range(r.count(entry["count"], f"{path}.count"))]
                 if "count" in entry else [group])
        taken = next((n for n in [group, *names] if n in groups or n in ids), None)
        if taken is not None:
            r.fail(f"{path}.name", f"the node name {taken!r} is already taken; every node "
                                   "and node group needs its own name")
        if kind.lower() == "ipu":
            processor = (r.choice(entry["processor"], f"{path}.processor", processors)
                         if "processor" in entry else default)
            if processor is None:
                r.fail(f"{path}.processor", "missing: give the IPUs a processor (GC2 or GC200) "
                                            "here or set spec.processor")
            new = b.add_ipus(names, processor)
            ipus.update(new.tolist())
        else:
            if "processor" in entry:
                r.fail(f"{path}.processor", f"only IPUs have a processor; this is a {kind!r}")
            new = b.add_nodes(names, kind)
        groups[group] = new
        ids.update(zip(names, new.tolist()))
    if not ipus:
        r.fail("spec.nodes", "no node has kind 'ipu': add at least one IPU")

    def link_options(entry: dict[str, Any], path: str) -> tuple[hw.LinkType, int, str]:
        type_name = r.string(entry["type"], f"{path}.type")
        if type_name not in types:
            r.fail(f"{path}.type", f"unknown link type {type_name!r}; declared under "
                                   f"spec.linkTypes: {', '.join(types) or 'none'}")
        count = r.count(entry["count"], f"{path}.count") if "count" in entry else 1
        role = entry.get("role", FABRIC)
        if role not in ROLES:
            r.fail(f"{path}.role", f"{role!r} is not a link role; use one of {', '.join(ROLES)}")
        return types[type_name], count, role

    for i, entry in enumerate(r.items(spec.get("links"), "spec.links")):
        path = f"spec.links[{i}]"
        entry = r.fields(entry, path, ("from", "to", "type"), ("count", "role"))
        a, c = r.node(entry["from"], f"{path}.from", ids), r.node(entry["to"], f"{path}.to", ids)
        if a == c:
            r.fail(f"{path}.to", "a link joins two different nodes, not a node to itself")
        b.add_links([a], [c], *link_options(entry, path))
    for i, entry in enumerate(r.items(spec.get("generators"), "spec.generators")):
        path = f"spec.generators[{i}]"
        entry = r.fields(entry, path, ("type",), _SHAPES + ("center", "count", "role"))
        shapes = [s for s in _SHAPES if s in entry]
        if len(shapes) != 1:
            r.fail(path, "give exactly one of ring, chain or star (the node group to join)")
        shape = shapes[0]
        group = r.string(entry[shape], f"{path}.{shape}")
        if group not in groups:
            r.fail(f"{path}.{shape}", f"no node group is named {group!r}; node groups: "
                                      f"{', '.join(list(groups)[:20])}")
        members = groups[group]
        if shape == "star":
            if "center" not in entry:
                r.fail(f"{path}.center", "missing: a star needs a center node")
            center = r.node(entry["center"], f"{path}.center", ids)
            if center in members:
                r.fail(f"{path}.center", "the center must not be one of the star's own nodes")
            a_ids, c_ids = members, np.full(len(members), center)
        elif "center" in entry:
            r.fail(f"{path}.center", f"only a star has a center, not a {shape}")
        elif shape == "ring" and len(members) > 2:
            a_ids, c_ids = members, np.roll(members, -1)
        else:  # a chain, or a ring of 2 (one link, not two parallel ones)
            a_ids, c_ids = members[:-1], members[1:]
        if len(a_ids):
            b.add_links(a_ids, c_ids, *link_options(entry, path))

    names_of = {v: k for k, v in ids.items()}

    def ipu_list(value: Any, path: str) -> list[int]:
        out = []
        for k, item in enumerate(r.items(value, path)):
            node = r.node(item, f"{path}[{k}]", ids)
            if node not in ipus:
                r.fail(f"{path}[{k}]", f"{item!r} is not an IPU")
            if node in out:
                r.fail(f"{path}[{k}]", f"{item!r} is listed twice")
            out.append(node)
        return out

    if "ringOrder" in spec:
        b.ring_order = ipu_list(spec["ringOrder"], "spec.ringOrder")
        missing = sorted(ipus - set(b.ring_order))
        if missing:
            r.fail("spec.ringOrder", f"{len(missing)} IPU(s) are missing, e.g. "
                                     f"{names_of[missing[0]]!r}: list every IPU exactly once")
    servers = [r.fields(s, f"spec.servers[{i}]", ("name", "kind"))
               for i, s in enumerate(r.items(spec.get("servers"), "spec.servers"))]
    in_unit: set[int] = set()
    for i, entry in enumerate(r.items(spec.get("units"), "spec.units")):
        path = f"spec.units[{i}]"
        entry = r.fields(entry, path, ("name", "kind", "ipus"), ("server",))
        members_list = ipu_list(entry["ipus"], f"{path}.ipus")
        if in_unit & set(members_list):
            r.fail(f"{path}.ipus", "an IPU belongs to one unit only; it is already in another")
        in_unit.update(members_list)
        server = entry.get("server", 0)
        if isinstance(server, bool) or not isinstance(server, int) or not (
                0 <= server < max(len(servers), 1)):
            r.fail(f"{path}.server", f"expected an index into spec.servers (0 to "
                                     f"{max(len(servers), 1) - 1}), got {server!r}")
        b.units.append(Unit(r.string(entry["name"], f"{path}.name"),
                            r.string(entry["kind"], f"{path}.kind"), tuple(members_list), server))
    b.servers = [Server(r.string(s["name"], f"spec.servers[{i}].name"),
                        r.string(s["kind"], f"spec.servers[{i}].kind"),
                        tuple(u for u, unit in enumerate(b.units) if unit.server == i))
                 for i, s in enumerate(servers)]
    if local is not None:
        b.sync_local_s = local
    if glob is not None:
        b.sync_global_s = glob
    b.memory_bandwidth_override_Bps = memory
    try:
        return b.build()  # the Router checks that every IPU can reach every other
    except SpecError as err:
        raise SpecError(f"{r.file}: {err}") from err
