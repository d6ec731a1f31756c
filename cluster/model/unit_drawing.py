"""A topology drawn a unit at a time: each card (C2) or machine (IPU-M2000) is one node,
with the nodes named after it (its gateway, its PCIe endpoint) folded in, and the links
between two units (or a unit and a host or switch) drawn as one edge per link type with
their count. A POD64 is then 16 machines and a host, laid out in two dimensions (Graphviz
``neato``), instead of a strip of 81 nodes (``ipupod topology show --format dot --level
unit``)."""

from __future__ import annotations

from collections import Counter

from cluster.model.rack_drawing import dot_quote, unit_of_nodes
from cluster.model.topology import HOST, ROLES, Topology
from cluster.model.units import GB


def render_unit_dot(topology: Topology) -> str:
    """The unit-level drawing as DOT (an undirected ``graph``)."""
    group = unit_of_nodes(topology)
    units = {unit.name: unit for unit in topology.units}
    host_types = sorted({topology.link_types[k].name for k, r in
                         zip(topology.link_type.tolist(), topology.link_role.tolist())
                         if r == ROLES.index(HOST)})
    legend = topology.name + " (one node per card or machine)"
    if host_types:
        legend += f"; dashed: host-only links ({', '.join(host_types)})"
    lines = [f"graph {dot_quote(topology.name)} {{",
             f"  graph [label={dot_quote(legend)}, "
             "labelloc=t, layout=neato, overlap=false, splines=true, sep=\"+12\"];"]
    kinds = dict(zip(group, topology.node_kinds))
    for name in dict.fromkeys(group):
        if name in units:
            unit = units[name]
            label = f"{name}\n{unit.kind}, {len(unit.ipus)} IPUs"
            lines.append(f"  {dot_quote(name)} [label={dot_quote(label)}, shape=box3d];")
        else:
            shape = "diamond" if kinds[name].endswith("switch") else "ellipse"
            lines.append(f"  {dot_quote(name)} [label={dot_quote(name)}, shape={shape}];")
    bundles: Counter[tuple[str, str, int, bool]] = Counter()
    host_role = ROLES.index(HOST)
    for a, b, kind, count, role in zip(topology.link_a.tolist(), topology.link_b.tolist(),
                                       topology.link_type.tolist(),
                                       topology.link_count.tolist(),
                                       topology.link_role.tolist()):
        ends = sorted((group[a], group[b]))
        if ends[0] != ends[1]:
            bundles[(ends[0], ends[1], kind, role == host_role)] += count
    for (a, b, kind, host_only), count in sorted(bundles.items()):
        link_type = topology.link_types[kind]
        label = f"{link_type.name} {link_type.bandwidth_Bps / GB:g} GB/s x{count}"
        # host-only links (dashed) all look alike: the legend names them, once
        attributes = "style=dashed" if host_only else f"label={dot_quote(label)}"
        lines.append(f"  {dot_quote(a)} -- {dot_quote(b)} [{attributes}];")
    lines.append("}")
    return "\n".join(lines)
