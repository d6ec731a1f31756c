"""Link faults: a physical link (bundle) that is slower, later, or cut.

A fault applies to both directions of one physical link ``l`` (directed links ``2l`` and
``2l+1``, see :mod:`cluster.model.topology`):

- ``bandwidth_factor`` multiplies the bundle's bandwidth (a lane down, a link trained at a
  lower speed);
- ``added_latency_seconds`` is added to every crossing (retries, a longer cable);
- ``cut`` takes the link away. Without a cut IPU-Link, traffic takes the shortest IPU-Link
  path left in its domain, and if the cut splits the domain, its parts route between each
  other through the network tree as any two domains do. A cut tree link (PCIe, InfiniBand,
  GW-Link, ...) has no alternative, the tree path being unique: a route that needs it raises
  :class:`LinkDown`.

:func:`cluster.model.faulted.with_faults` returns a new
:class:`~cluster.model.topology.Topology` carrying the faults (``Topology.faults``, by
physical link); the cost model, phantom simulation and planner take it unchanged.
:class:`LinkFault` is defined beside the topology that carries it
(:mod:`cluster.model.topology`) and named here too. Links are named ``"A--B"`` by their
nodes (:func:`find_link`, :func:`link_name`).
"""

from __future__ import annotations

import difflib

import numpy as np

from cluster.errors import ScheduleError, UserError
from cluster.model.topology import LinkFault, Topology

__all__ = ["SEPARATOR", "LinkDown", "LinkFault", "check_link_index", "describe_links",
           "find_link", "link_name"]

SEPARATOR = "--"
_LIST_HINT = "list the links with `ipupod links` or `ipupod topology show SPEC`"
_LISTED = 8  # links named in a message before "and N more"


class LinkDown(ScheduleError):
    """A transfer needs a cut link, or cut links leave two IPUs with no path between them."""


def link_name(topology: Topology, link: int) -> str:
    """``'A--B (type)'`` for physical link (bundle) ``link``, e.g.
    ``'s0.card2.ipu1--s0.card3.ipu1 (ipu-link-rail)'``."""
    link = check_link_index(topology, link)
    a, b = int(topology.link_a[link]), int(topology.link_b[link])
    kind = topology.link_types[int(topology.link_type[link])].name
    return f"{topology.node_names[a]}{SEPARATOR}{topology.node_names[b]} ({kind})"


def find_link(topology: Topology, text: str) -> int:
    """The physical link named by ``text``: ``'A--B'`` (node names, either order; a
    trailing ``' (type)'`` as :func:`link_name` writes it is allowed) or its index."""
    text = text.strip()
    if text.isdigit():
        return check_link_index(topology, int(text))
    if text.endswith(")") and " (" in text:
        text = text[:text.rindex(" (")].strip()
    ends = [part.strip() for part in text.split(SEPARATOR)]
    if len(ends) != 2 or not all(ends):
        raise UserError(
            f"cannot read {text!r} as a link: name it by its two nodes, 'A{SEPARATOR}B' (e.g. "
            f"{link_name(topology, 0).split(' (')[0]!r}), or by its index; {_LIST_HINT}")
    a, b = (_node(topology, end) for end in ends)
    if a == b:
        raise UserError(f"{text!r} names one node twice: a link joins two different nodes")
    la, lb = topology.link_a, topology.link_b
    found = np.flatnonzero(((la == a) & (lb == b)) | ((la == b) & (lb == a)))
    if len(found) == 0:
        raise UserError(
            f"no link joins {ends[0]!r} and {ends[1]!r} in topology {topology.name!r}; "
            f"{ends[0]}'s links are: {_some_links(topology, a)}")
    return int(found[0])


def check_link_index(topology: Topology, link: object) -> int:
    """``link`` as an ``int`` if it is the index of one of ``topology``'s physical links
    (an integer, not a bool, from 0 to the link count less one); else a UserError."""
    count = topology.link_count_physical
    if (isinstance(link, (int, np.integer)) and not isinstance(link, (bool, np.bool_))
            and 0 <= link < count):
        return int(link)
    raise UserError(
        f"there is no link {link!r} in topology {topology.name!r}: links are numbered "
        f"0 to {count - 1}; {_LIST_HINT}")


def _node(topology: Topology, name: str) -> int:
    try:
        return topology.node_names.index(name)
    except ValueError:
        close = difflib.get_close_matches(name, topology.node_names, n=3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise UserError(
            f"no node named {name!r} in topology {topology.name!r}{hint}: {_LIST_HINT}"
        ) from None


def _some_links(topology: Topology, node: int) -> str:
    mine = np.flatnonzero((topology.link_a == node) | (topology.link_b == node))
    return describe_links(topology, mine.tolist()) or "none"


def describe_links(topology: Topology, links: list[int] | frozenset[int]) -> str:
    """Names of some links, for messages: at most a few, then ``'and N more'``."""
    ordered = sorted(links)
    names = ", ".join(link_name(topology, l) for l in ordered[:_LISTED])
    more = f" and {len(ordered) - _LISTED} more" if len(ordered) > _LISTED else ""
    return names + more
