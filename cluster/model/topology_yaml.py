"""Topologies from YAML files: :func:`load_yaml_topology` reads an ``ipupod/v1`` file.

A file either names a preset (``spec.preset``, with figure choices, link overrides and sync
costs) or describes a graph: link types, node groups, links and generators (ring, chain,
star) that expand into links. ``examples/topologies/`` has one of each. Bandwidths are
decimal GB/s per direction, latencies and sync costs nanoseconds; they become bytes per
second and seconds here. Any mistake raises :class:`SpecError` naming the file, the field
path (``spec.links[3].to``) and what to change: never a raw traceback.
"""

from __future__ import annotations

import difflib
import math
import os
from typing import Any

import numpy as np

from cluster.errors import SpecError, UserError
from cluster.model import hardware as hw
from cluster.model.builder import TopologyBuilder
from cluster.model.presets import LinkOverride, PresetOptions, build_preset
from cluster.model.strict_yaml import FieldReader, parse_yaml, read_text, show, shown_path
from cluster.model.topology import FABRIC, ROLES, Server, Topology, Unit

API_VERSIONS = ("ipupod/v1",)
KIND = "Topology"
MAX_GRAPH_NODES = 4096  # of a graph-form file: routing it is quadratic in its nodes
MAX_COUNT = MAX_GRAPH_NODES  # of one group or one bundle of parallel links
MAX_NAME_CHARS = 200  # of a name in the file (the topology's, a node's, a link type's)
# Bandwidths (GB/s), latencies and sync costs (ns) outside this range are typos or
# overflows: 1 B/s to 1 EB/s, up to 1,000 s; inside it every derived time stays finite.
MIN_POSITIVE = 1e-9
MAX_NUMBER = 1e12
_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec")
_COMMON = ("figures", "sync_ns", "memory_bandwidth_GBps")
_PRESET_FIELDS = _COMMON + ("linkOverrides",)
_GRAPH_FIELDS = _COMMON + ("processor", "linkTypes", "links", "generators", "ringOrder",
                           "units", "servers")
_SHAPES = ("ring", "chain", "star")


class _Reader(FieldReader):
    """The topology file's checks, on top of the shared ones."""

    def items(self, value: Any, path: str) -> list[Any]:
        if value is not None and not isinstance(value, list):
            self.fail(path, f"expected a list (one '- ' line per entry), got {show(value)}")
        return value or []

    def string(self, value: Any, path: str) -> str:
        """A name: non-empty printable text on one line, at most MAX_NAME_CHARS."""
        if not isinstance(value, str) or not value.strip():
            self.fail(path, f"expected a non-empty text, got {show(value)}")
        if len(value) > MAX_NAME_CHARS or not value.isprintable():
            self.fail(path, f"expected printable text of at most {MAX_NAME_CHARS} characters "
                            f"on one line, got {show(value)}")
        return value

    def number(self, value: Any, path: str, positive: bool = False, inf: bool = False) -> float:
        """A real number, 0 or more (more than 0 if ``positive``); infinite only if ``inf``."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            hint = ""
            if isinstance(value, str) and value.replace("e", "", 1).replace(".", "", 1).isdigit():
                hint = " (PyYAML reads 1e9 as text: write 1.0e+9 or 1000000000)"
            self.fail(path, f"expected a number, got {show(value)}{hint}")
        try:
            number = float(value)
        except OverflowError:
            self.fail(path, f"{show(value)} is too large: numbers here run to {MAX_NUMBER:g}")
        if math.isnan(number) or (math.isinf(number) and not inf):
            self.fail(path, f"expected a finite number, got {value!r}")
        if (positive and not number > 0) or number < 0:
            self.fail(path, f"must be {'more than 0' if positive else '0 or more'}, got {value!r}")
        if (positive and number < MIN_POSITIVE) or MAX_NUMBER < number < math.inf:
            low = f"{MIN_POSITIVE:g}" if positive else "0"
            self.fail(path, f"must be from {low} to {MAX_NUMBER:g} (GB/s or ns), got {value!r}")
        return number

    def count(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected a whole number, got {show(value)}")
        if not 1 <= value <= MAX_COUNT:
            self.fail(path, f"must be from 1 to {MAX_COUNT:,}, got {value}")
        return value

    def choice(self, value: Any, path: str, choices: dict[str, Any]) -> Any:
        if not isinstance(value, str) or value.upper() not in choices:
            self.fail(path, f"{show(value)} is not one of {', '.join(choices)}")
        return choices[value.upper()]

    def node(self, value: Any, path: str, ids: dict[str, int]) -> int:
        name = self.string(value, path)
        if name not in ids:
            close = difflib.get_close_matches(name, list(ids), n=1) if len(ids) < 10_000 else []
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            self.fail(path, f"no node is named {name!r}{hint}: a link to nowhere; declare it "
                            "under spec.nodes or fix the name")
        return ids[name]


def load_yaml_topology(path: str | os.PathLike[str]) -> Topology:
    """Read an ``ipupod/v1`` topology file and build it (routes included)."""
    file = os.fspath(path)
    name = shown_path(file)
    data = parse_yaml(read_text(file, "topology"), name, "topology")
    r = _Reader(name)
    if data is None:
        r.fail("", "the file is empty; see examples/topologies/ for the format")
    if isinstance(data, dict) and data.get("apiVersion") not in API_VERSIONS:
        got = f"got {show(data['apiVersion'])}" if "apiVersion" in data else "it is missing"
        r.fail("apiVersion", f"supported versions: {', '.join(API_VERSIONS)} ({got})")
    top = r.fields(data, "", _TOP_FIELDS)
    if top["kind"] != KIND:
        r.fail("kind", f"must be {KIND!r}, got {show(top['kind'])}")
    metadata = r.fields(top["metadata"], "metadata", ("name",), ("description",))
    name = r.string(metadata["name"], "metadata.name")
    if not isinstance(metadata.get("description", ""), str):
        r.fail("metadata.description", f"expected text, got {show(metadata['description'])}")
    spec = top["spec"]
    if isinstance(spec, dict) and "preset" in spec:
        return _load_preset(r, spec, name)
    if isinstance(spec, dict) and "nodes" not in spec:
        r.fields(spec, "spec", (), ("preset", "nodes") + _GRAPH_FIELDS)  # a typo first, if any
        r.fail("spec", "give either 'preset' (a preset name) or 'nodes' (an explicit graph)")
    return _load_graph(r, spec, name)


def _common(r: _Reader, spec: dict[str, Any]) -> tuple[
        hw.FigureChoice, float | None, float | None, float | None]:
    """Figures, sync costs (s) and the memory bandwidth override (B/s) of either form."""
    figures = hw.SEED_FIGURES
    if "figures" in spec:
        try:
            figures = hw.FigureChoice.all_from(spec["figures"])
        except UserError as err:
            r.fail("spec.figures", str(err))
    sync = r.fields(spec.get("sync_ns", {}), "spec.sync_ns", (), ("local", "global"))
    local, glob = (None if key not in sync else r.number(sync[key], f"spec.sync_ns.{key}") / 1e9
                   for key in ("local", "global"))
    memory = spec.get("memory_bandwidth_GBps")
    if memory is not None:
        memory = r.number(memory, "spec.memory_bandwidth_GBps", positive=True, inf=True) * 1e9
    return figures, local, glob, memory


def _load_preset(r: _Reader, spec: dict[str, Any], name: str) -> Topology:
    spec = r.fields(spec, "spec", ("preset",), _PRESET_FIELDS, " with spec.preset")
    preset = r.string(spec["preset"], "spec.preset")
    figures, local, glob, memory = _common(r, spec)
    given = {} if spec.get("linkOverrides") is None else spec["linkOverrides"]
    if not isinstance(given, dict):
        r.fail("spec.linkOverrides", f"expected a mapping of link type names, got {show(given)}")
    overrides = []
    for link_name, override in given.items():
        path = f"spec.linkOverrides.{link_name}"
        fields = r.fields(override, path, (), ("bandwidth_GBps", "latency_ns"))
        if not fields:
            r.fail(path, "give bandwidth_GBps, latency_ns or both")
        bandwidth, latency = fields.get("bandwidth_GBps"), fields.get("latency_ns")
        overrides.append((str(link_name), LinkOverride(
            None if bandwidth is None else r.number(bandwidth, f"{path}.bandwidth_GBps", True),
            None if latency is None else r.number(latency, f"{path}.latency_ns"))))
    try:
        topology = build_preset(preset, PresetOptions(figures, tuple(overrides), local, glob))
    except UserError as err:  # a SpecError, or a UserError from the hardware catalogue
        r.fail("spec.linkOverrides" if "has no link type" in str(err) else "spec.preset", str(err))
    topology.name = name
    if memory is not None:  # set before first use: ipu_memory_bandwidth_Bps is cached
        topology.memory_bandwidth_override_Bps = memory
    return topology


def _load_graph(r: _Reader, spec: Any, name: str) -> Topology:
    spec = r.fields(spec, "spec", ("nodes",), _GRAPH_FIELDS, " in a graph (no spec.preset)")
    figures, local, glob, memory = _common(r, spec)
    graph = _Graph(r, TopologyBuilder(name), {"GC2": hw.gc2(figures), "GC200": hw.gc200()})
    graph.read_link_types(spec.get("linkTypes"))
    graph.read_nodes(spec["nodes"], spec.get("processor"))
    for i, entry in enumerate(r.items(spec.get("links"), "spec.links")):
        graph.read_link(entry, f"spec.links[{i}]")
    for i, entry in enumerate(r.items(spec.get("generators"), "spec.generators")):
        graph.read_generator(entry, f"spec.generators[{i}]")
    graph.check_pairs()
    graph.read_ring_and_units(spec)
    b = graph.b
    b.sync_local_seconds = b.sync_local_seconds if local is None else local
    b.sync_global_seconds = b.sync_global_seconds if glob is None else glob
    b.memory_bandwidth_override_Bps = memory
    try:
        return b.build()  # its Router checks that every IPU can reach every other
    except SpecError as err:
        raise SpecError(f"{r.file}: {err}") from err


class _Graph:
    """An explicit graph read into a :class:`TopologyBuilder`, section by section."""

    def __init__(self, r: _Reader, b: TopologyBuilder,
                 processors: dict[str, hw.Processor]) -> None:
        self.r, self.b, self.processors = r, b, processors
        self.types: dict[str, hw.LinkType] = {}
        self.groups: dict[str, np.ndarray] = {}  # node group name -> builder ids
        self.ids: dict[str, int] = {}  # node name -> builder id
        self.ipus: dict[int, str] = {}  # builder id -> name, IPUs only
        self.keys: list[np.ndarray] = []  # per links entry, its node pairs: lo * nodes + hi
        self.key_paths: list[str] = []

    def read_link_types(self, value: Any) -> None:
        r = self.r
        for i, entry in enumerate(r.items(value, "spec.linkTypes")):
            path = f"spec.linkTypes[{i}]"
            entry = r.fields(entry, path, ("name", "bandwidth_GBps", "latency_ns"))
            name = r.string(entry["name"], f"{path}.name")
            if name in self.types:
                r.fail(f"{path}.name", f"link type {name!r} is declared twice; rename one")
            self.types[name] = hw.LinkType(
                name, r.number(entry["bandwidth_GBps"], f"{path}.bandwidth_GBps", True) * 1e9,
                r.number(entry["latency_ns"], f"{path}.latency_ns") / 1e9, f"YAML {r.file}")

    def read_nodes(self, value: Any, processor: Any) -> None:
        r = self.r
        default = None if processor is None else r.choice(processor, "spec.processor",
                                                          self.processors)
        for i, entry in enumerate(r.items(value, "spec.nodes")):
            path = f"spec.nodes[{i}]"
            entry = r.fields(entry, path, ("name", "kind"), ("count", "processor"))
            group = r.string(entry["name"], f"{path}.name")
            kind = r.string(entry["kind"], f"{path}.kind")
            count = r.count(entry["count"], f"{path}.count") if "count" in entry else 1
            if len(self.ids) + count > MAX_GRAPH_NODES:
                r.fail(f"{path}.count", f"a graph holds at most {MAX_GRAPH_NODES:,} nodes (its "
                                        "routes are found pair by pair); describe larger "
                                        "systems with a preset (spec.preset: pod65536, ...)")
            names = [f"{group}{k}" for k in range(count)] if "count" in entry else [group]
            if len(names[-1]) > MAX_NAME_CHARS:
                r.fail(f"{path}.name", f"its nodes are named {group[:20]!r}... with 0 to "
                                       f"{count - 1} after it, and a node's name runs to "
                                       f"{MAX_NAME_CHARS} characters: shorten the name")
            taken = next((n for n in [group, *names] if n in self.groups or n in self.ids), None)
            if taken is not None:
                r.fail(f"{path}.name", f"the name {taken!r} is already taken; every node and "
                                       "node group needs its own name")
            if kind.lower() == "ipu":
                chosen = (r.choice(entry["processor"], f"{path}.processor", self.processors)
                          if "processor" in entry else default)
                if chosen is None:
                    r.fail(f"{path}.processor", "missing: give the IPUs a processor (GC2 or "
                                                "GC200) here or set spec.processor")
                self.groups[group] = self.b.add_ipus(names, chosen)
                self.ipus.update(zip(self.groups[group].tolist(), names))
            elif "processor" in entry:
                r.fail(f"{path}.processor", f"only IPUs have a processor; this is a {kind!r}")
            else:
                self.groups[group] = self.b.add_nodes(names, kind)
            self.ids.update(zip(names, self.groups[group].tolist()))
        if not self.ipus:
            r.fail("spec.nodes", "no node has kind 'ipu': add at least one IPU")

    def add_links(self, a: np.ndarray, c: np.ndarray, entry: dict[str, Any], path: str) -> None:
        """Join ``a[i]`` to ``c[i]`` (builder ids) with the entry's type, count and role."""
        r = self.r
        type_name = r.string(entry["type"], f"{path}.type")
        if type_name not in self.types:
            r.fail(f"{path}.type", f"unknown link type {type_name!r}; declared under "
                                   f"spec.linkTypes: {', '.join(self.types) or 'none'}")
        count = r.count(entry["count"], f"{path}.count") if "count" in entry else 1
        role = entry.get("role", FABRIC)
        if role not in ROLES:
            r.fail(f"{path}.role", f"{show(role)} is not a role; use {' or '.join(ROLES)}")
        if len(a):
            self.b.add_links(a, c, self.types[type_name], count, role)
            self.keys.append(np.minimum(a, c) * len(self.ids) + np.maximum(a, c))
            self.key_paths.append(path)

    def read_link(self, entry: Any, path: str) -> None:
        r = self.r
        entry = r.fields(entry, path, ("from", "to", "type"), ("count", "role"))
        a = r.node(entry["from"], f"{path}.from", self.ids)
        c = r.node(entry["to"], f"{path}.to", self.ids)
        if a == c:
            r.fail(f"{path}.to", "a link joins two different nodes, not a node to itself")
        self.add_links(np.array([a]), np.array([c]), entry, path)

    def read_generator(self, entry: Any, path: str) -> None:
        r = self.r
        entry = r.fields(entry, path, ("type",), _SHAPES + ("center", "count", "role"))
        shapes = [s for s in _SHAPES if s in entry]
        if len(shapes) != 1:
            r.fail(path, "give exactly one of ring, chain or star (the node group to join)")
        shape = shapes[0]
        group = r.string(entry[shape], f"{path}.{shape}")
        if group not in self.groups:
            r.fail(f"{path}.{shape}", f"no node group is named {group!r}; node groups: "
                                      f"{', '.join(list(self.groups)[:20])}")
        members = self.groups[group]
        if shape == "star":
            if "center" not in entry:
                r.fail(f"{path}.center", "missing: a star needs a center node")
            center = r.node(entry["center"], f"{path}.center", self.ids)
            if center in members:
                r.fail(f"{path}.center", "the center must not be one of the star's own nodes")
            self.add_links(members, np.full(len(members), center), entry, path)
        elif "center" in entry:
            r.fail(f"{path}.center", f"only a star has a center, not a {shape}")
        elif shape == "ring" and len(members) > 2:
            self.add_links(members, np.roll(members, -1), entry, path)
        else:  # a chain, or a ring of 2: one link, not two parallel ones
            self.add_links(members[:-1], members[1:], entry, path)

    def check_pairs(self) -> None:
        """Two entries joining the same two nodes would silently add up to one bundle."""
        if not self.keys:
            return
        flat = np.concatenate(self.keys)
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        repeats = np.flatnonzero(first[inverse] != np.arange(len(flat)))
        if len(repeats):
            again = int(repeats[0])
            owner = np.repeat(np.arange(len(self.keys)), [len(k) for k in self.keys])
            before = self.key_paths[owner[first[inverse[again]]]]
            name_of = {v: k for k, v in self.ids.items()}
            lo, hi = divmod(int(flat[again]), len(self.ids))
            self.r.fail(self.key_paths[owner[again]], f"{name_of[lo]!r} and {name_of[hi]!r} are "
                        f"already joined by {before}; declare one link (count: parallel links)")

    def ipu_list(self, value: Any, path: str) -> list[int]:
        """Builder ids of a list of IPU names, each at most once."""
        out: dict[int, None] = {}
        for k, item in enumerate(self.r.items(value, path)):
            node = self.r.node(item, f"{path}[{k}]", self.ids)
            if node not in self.ipus or node in out:
                self.r.fail(f"{path}[{k}]", f"{item!r} is " + (
                    "listed twice" if node in self.ipus else "not an IPU"))
            out[node] = None
        return list(out)

    def read_ring_and_units(self, spec: dict[str, Any]) -> None:
        r, b = self.r, self.b
        if "ringOrder" in spec:
            b.ring_order = self.ipu_list(spec["ringOrder"], "spec.ringOrder")
            listed = set(b.ring_order)
            missing = [n for i, n in self.ipus.items() if i not in listed]
            if missing:
                r.fail("spec.ringOrder", f"{len(missing)} IPU(s) are missing, e.g. "
                                         f"{missing[0]!r}: list every IPU exactly once")
        servers = [r.fields(s, f"spec.servers[{i}]", ("name", "kind"))
                   for i, s in enumerate(r.items(spec.get("servers"), "spec.servers"))]
        in_unit: set[int] = set()
        for i, entry in enumerate(r.items(spec.get("units"), "spec.units")):
            path = f"spec.units[{i}]"
            entry = r.fields(entry, path, ("name", "kind", "ipus"), ("server",))
            ipus = self.ipu_list(entry["ipus"], f"{path}.ipus")
            if in_unit & set(ipus):
                r.fail(f"{path}.ipus", "an IPU belongs to one unit only; one is in another")
            in_unit.update(ipus)
            server, last = entry.get("server", 0), max(len(servers), 1) - 1
            if isinstance(server, bool) or not isinstance(server, int) or not 0 <= server <= last:
                r.fail(f"{path}.server", f"expected an index into spec.servers (0 to {last}), "
                                         f"got {show(server)}")
            b.units.append(Unit(r.string(entry["name"], f"{path}.name"),
                                r.string(entry["kind"], f"{path}.kind"), tuple(ipus), server))
        b.servers = [Server(r.string(s["name"], f"spec.servers[{i}].name"),
                            r.string(s["kind"], f"spec.servers[{i}].kind"),
                            tuple(u for u, unit in enumerate(b.units) if unit.server == i))
                     for i, s in enumerate(servers)]
