"""A topology drawn as its hardware is racked, one node per IPU (``ipupod topology show
--format dot``).

Each server is a ``cluster_`` box (a POD's rack, a DSS 8440), each card or machine a box
inside it, and the servers stand side by side in rows chosen to keep the picture near
square. Inside a POD rack the IPU-M2000s are stacked in order (``m0`` at the top), each
machine's IPUs and gateway in a row; inside a DSS 8440 the C2 cards stand side by side in
order, each card's PCIe endpoint above its two IPUs. The host (and a server's PCIe switch)
tops its server; switches that join servers stand amid the servers' hosts. Invisible edges hold
that grid; the links are drawn over it without moving it, one colour per link type, dashed
when host-only, thick when a bundle; one legend names every type instead of a label on
each edge. A topology without servers (a YAML file may have none) is laid out freely.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from html import escape

from cluster.errors import SettingError
from cluster.model.hardware import DeviceKind
from cluster.model.topology import HOST, ROLES, Topology
from cluster.model.units import GB

DOT_MAX_NODES = 4096  # beyond this a drawing is an unreadable hairball
SLOTTED_KINDS = frozenset({DeviceKind.C2})
"""Unit kinds that stand side by side in a server's slots (PCIe cards); any other unit
(an IPU-M2000, a YAML file's) is stacked in its rack."""
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#7f7f7f")
LEGEND = "legend: link types"
CELL_INCHES = (1.4, 0.8)
"""About how wide a column and how tall a row of the grid draws (inches): used to choose
how many servers stand in a row."""


def render_dot(topology: Topology) -> str:
    """The DOT drawing (an undirected ``graph``) the module docstring describes.

    Raises :class:`SettingError` (``format``) above ``DOT_MAX_NODES`` nodes: such a drawing
    is unreadable.
    """
    if topology.node_count > DOT_MAX_NODES:
        raise SettingError(
            "format", "topology {name!r} has {nodes:,} nodes: a DOT drawing of more than "
            "{most:,} would be unreadable; use {format} json (or text), {level} unit, or a "
            "smaller topology", name=topology.name, nodes=topology.node_count,
            most=DOT_MAX_NODES)
    layout = _Layout(topology)
    racked = bool(layout.racks)
    title = f"{topology.name}: one node per IPU; boxes are servers, cards and machines"
    lines = [f"graph {dot_quote(topology.name)} {{",
             f"  graph [label={dot_quote(title)}, labelloc=t, fontname=Helvetica, "
             "fontsize=16, newrank=true, concentrate=true, nodesep=0.15, ranksep=0.2];",
             "  node [fontname=Helvetica, fontsize=11, height=0.3, width=0.5, "
             "margin=\"0.06,0.02\"];",
             *_boxes(layout), _legend(topology)]
    ranks, holds = _skeleton(layout) if racked else ([], {})
    lines += [*ranks, *_edges(topology, holds)]
    lines.append("}")
    return "\n".join(lines)


def dot_quote(text: str) -> str:
    """A DOT double-quoted ID: names hold dots (``s0.card0.ipu0``), so always quote."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def unit_of_nodes(topology: Topology) -> list[str]:
    """For every node, the name of what it is drawn as: its unit if it is one of the
    unit's IPUs or is named under it (``r0.m3.gw`` under ``r0.m3``), else itself."""
    group = list(topology.node_names)
    for unit in topology.units:
        for ipu in unit.ipus:
            group[ipu] = unit.name
    prefixes = {unit.name + "." for unit in topology.units}
    for node, name in enumerate(topology.node_names):
        owner = name.rsplit(".", 1)[0] + "."
        if node >= topology.ipu_count and (owner in prefixes or name + "." in prefixes):
            group[node] = owner[:-1] if owner in prefixes else name
    return group


def _shape(kind: str) -> str:
    """IPUs are boxes, any kind of switch (``switch``, ``pcie-switch``, ...) a diamond."""
    if kind == "ipu":
        return "box"
    return "diamond" if kind.endswith("switch") else "ellipse"


def _short(name: str, within: str) -> str:
    """A node's name inside its box: ``r0.m3.ipu2`` in ``r0.m3`` is ``ipu2``."""
    return name[len(within) + 1:] if name.startswith(within + ".") else name


class _Layout:
    """Which box every node sits in, and its row and column on the grid."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        owner = unit_of_nodes(topology)
        index = {unit.name: u for u, unit in enumerate(topology.units)}
        self.unit_nodes: dict[int, list[int]] = defaultdict(list)
        self.server_nodes: dict[int, list[int]] = defaultdict(list)
        self.top: list[int] = []
        servers = [server.name + "." for server in topology.servers]
        for node, name in enumerate(topology.node_names):
            if owner[node] in index:
                self.unit_nodes[index[owner[node]]].append(node)
                continue
            inside = [s for s, prefix in enumerate(servers) if name.startswith(prefix)]
            (self.server_nodes[inside[0]] if inside else self.top).append(node)
        for nodes in self.unit_nodes.values():  # IPUs in order, then the rest
            nodes.sort(key=lambda node: (node >= topology.ipu_count, node))
        self.racks = [self._rack_grid(s) for s in range(len(topology.servers))]

    def _rack_grid(self, server: int) -> list[list[int]]:
        """The server's rows, each its nodes left to right: hosts on top, then the
        server's other nodes, then its units (stacked, or side by side in slots)."""
        topology = self.topology
        own = sorted(self.server_nodes[server],
                     key=lambda node: (topology.node_kinds[node] != "host", node))
        rows = [[node] for node in own]
        units = [self.unit_nodes[u] for u in topology.servers[server].units]
        if units and all(topology.units[u].kind in SLOTTED_KINDS
                         for u in topology.servers[server].units):
            slots = [sorted(nodes, key=lambda n: (n < topology.ipu_count, n)) for nodes in units]
            depth = max(len(nodes) for nodes in slots)
            rows += [[nodes[r] for nodes in slots if r < len(nodes)] for r in range(depth)]
        else:
            rows += [row for nodes in units for row in self._stacked_rows(nodes)]
        return [row for row in rows if row]

    def _stacked_rows(self, nodes: list[int]) -> list[list[int]]:
        """A stacked unit's IPUs in rows of about the square root of their number (an
        IPU-M2000's four in two rows of two: the two rungs of the POD's IPU-Link ladder,
        rails running down), its other nodes (a gateway) at the end of the first row."""
        ipus = [node for node in nodes if node < self.topology.ipu_count]
        rest = [node for node in nodes if node >= self.topology.ipu_count]
        wide = max(1, math.isqrt(len(ipus) - 1) + 1) if ipus else 1
        rows = [ipus[i:i + wide] for i in range(0, len(ipus), wide)] or [[]]
        rows[0] = rows[0] + rest
        return rows

    def rows(self) -> list[list[list[int]]]:
        """The grid: global rows (top row first), each a list of racks' segments left to
        right (a segment: one rack's nodes in that row), so rack order is kept."""
        if not self.racks:
            return []
        height = max(len(rack) for rack in self.racks)
        width = max(max(len(row) for row in rack) for rack in self.racks)
        per_row = _racks_per_row(len(self.racks), width, height)
        grid: list[list[list[int]]] = []
        for first in range(0, len(self.racks), per_row):
            racks = self.racks[first:first + per_row]
            grid += [[rack[r] if r < len(rack) else [] for rack in racks] for r in range(height)]
        middle = (len(grid[0]) + 1) // 2  # switches between servers: amid the hosts
        grid[0] = [*grid[0][:middle], self.top, *grid[0][middle:]]
        return grid


    def wide(self) -> bool:
        """Whether the grid (without the legend) is wider than tall, about: then the
        legend goes below it, else beside it."""
        rows = self.rows()
        across = max(sum(max(len(r) for r in rack) for rack in self.racks[:len(rows[0])]), 1)
        return across * CELL_INCHES[0] > len(rows) * CELL_INCHES[1]


def _racks_per_row(racks: int, width: int, height: int) -> int:
    """How many racks stand side by side so that the picture is nearest a square."""
    def skew(per_row: int) -> float:
        wide = per_row * width * CELL_INCHES[0]
        tall = math.ceil(racks / per_row) * height * CELL_INCHES[1]
        return abs(math.log(wide / tall))
    return min(range(1, racks + 1), key=skew)


def _node_line(topology: Topology, node: int, within: str) -> str:
    """A node, labelled by its name inside its box (by its kind if named as the box: a
    card's PCIe endpoint)."""
    name, kind = topology.node_names[node], topology.node_kinds[node]
    label = kind if name == within else _short(name, within)
    return (f"{dot_quote(name)} [label={dot_quote(label)}, "
            f"shape={_shape(topology.node_kinds[node])}];")


def _boxes(layout: _Layout) -> list[str]:
    """The servers' and units' ``cluster_`` subgraphs with their nodes, then the rest."""
    topology, lines = layout.topology, []
    in_server: set[int] = set()
    for s, server in enumerate(topology.servers):
        lines += [f"  subgraph {dot_quote('cluster_' + server.name)} {{",
                  f"    label={dot_quote(f'{server.name} ({server.kind})')}; style=bold;"]
        lines += [f"    {_node_line(topology, n, server.name)}" for n in layout.server_nodes[s]]
        for u in server.units:
            lines += _unit_box(layout, u, "    ")
        lines.append("  }")
        in_server.update(server.units)
    for u in range(len(topology.units)):
        if u not in in_server:
            lines += _unit_box(layout, u, "  ")
    lines += [f"  {_node_line(topology, n, '')}" for n in layout.top]
    return lines


def _unit_box(layout: _Layout, u: int, indent: str) -> list[str]:
    unit = layout.topology.units[u]
    return [f"{indent}subgraph {dot_quote('cluster_' + unit.name)} {{",
            f"{indent}  label={dot_quote(f'{unit.name} ({unit.kind})')}; style=rounded; "
            "fontsize=12;",
            *[f"{indent}  {_node_line(layout.topology, n, unit.name)}"
              for n in layout.unit_nodes[u]],
            f"{indent}}}"]


def _skeleton(layout: _Layout) -> tuple[list[str], dict[tuple[int, int], int]]:
    """Same-rank groups and the edges (``(upper or left, lower or right)``: weight) that
    hold the grid of :meth:`_Layout.rows`; the legend (node -1) beside or below it."""
    names = [*layout.topology.node_names, LEGEND]
    ranks: list[str] = []
    holds: dict[tuple[int, int], int] = {}
    rows = layout.rows()
    if layout.wide():
        rows.append([[-1]])
    else:
        rows[0] = [*rows[0], [-1]]
    previous: list[list[int]] = []
    for row in rows:
        flat = [node for segment in row for node in segment]
        ranks.append("  { rank=same; " + " ".join(dot_quote(names[n]) for n in flat) + " }")
        holds.update(dict.fromkeys(itertools.pairwise(flat), 1))  # flat: a left of b
        if previous:
            above = [node for segment in previous for node in segment]
            holds.setdefault((above[0], flat[0]), 1)  # this row below the one above
            for top, bottom in zip(previous, row):  # keep each rack's columns straight
                holds.update({pair: 100 for pair in zip(top, bottom)})
        previous = row
    return ranks, holds


def _edges(topology: Topology, holds: dict[tuple[int, int], int]) -> list[str]:
    """One edge per link or bundle: coloured by type, dashed if host-only, thick if a
    bundle; unlabelled (the legend names the types). A link along the grid holds it (in
    the grid's direction, with its weight); any other moves nothing. Then the grid's
    invisible edges where no link runs."""
    names = [*topology.node_names, LEGEND]
    host, lines = ROLES.index(HOST), []
    racked = bool(holds)
    for a, b, t, count, role in zip(topology.link_a.tolist(), topology.link_b.tolist(),
                                    topology.link_type.tolist(), topology.link_count.tolist(),
                                    topology.link_role.tolist()):
        style = ", style=dashed" if role == host else ""
        width = ", penwidth=2.5" if count > 1 else ""
        if (b, a) in holds:
            a, b = b, a
        weight = holds.pop((a, b), None)
        place = (f", weight={weight}" if weight is not None
                 else ", constraint=false, weight=0" if racked else "")
        lines.append(f"  {dot_quote(names[a])} -- {dot_quote(names[b])} "
                     f"[color=\"{COLOURS[t % len(COLOURS)]}\"{style}{width}{place}];")
    lines += [f"  {dot_quote(names[a])} -- {dot_quote(names[b])} [style=invis, weight={w}];"
              for (a, b), w in holds.items()]
    return lines


def _legend(topology: Topology) -> str:
    """One HTML-table node: per link type in use, its colour, GB/s each way and count."""
    rows = []
    host = ROLES.index(HOST)
    for t, link_type in enumerate(topology.link_types):
        mine = topology.link_type == t
        if not mine.any():
            continue
        sizes = Counter(topology.link_count[mine].tolist())
        count = ", ".join(f"{n} link{'s' if n > 1 else ''}" if size == 1 else
                          f"{n} bundle{'s' if n > 1 else ''} of {size} (thick)"
                          for size, n in sorted(sizes.items()))
        dashed = " (dashed: host only)" if (topology.link_role[mine] == host).all() else ""
        gbps = f"{link_type.bandwidth_Bps / GB:.6g}"
        rows.append(f'<tr><td bgcolor="{COLOURS[t % len(COLOURS)]}">   </td>'
                    f'<td align="left">{escape(link_type.name)}{dashed}</td>'
                    f'<td align="right">{gbps} GB/s each way</td>'
                    f'<td align="left">{count}</td></tr>')
    table = ('<table border="0" cellborder="1" cellspacing="0" cellpadding="3">'
             '<tr><td colspan="4"><b>links</b></td></tr>' + "".join(rows) + "</table>")
    return f"  {dot_quote(LEGEND)} [shape=plaintext, label=<{table}>];"
