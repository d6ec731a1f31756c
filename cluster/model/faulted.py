"""A topology with link faults applied: its own copy, with routes that go round cut
IPU-Links (:mod:`cluster.model.link_faults` says what a fault is)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from cluster.errors import UserError
from cluster.model.link_faults import LinkFault, check_link_index
from cluster.model.routing import router_of
from cluster.model.topology import Topology


def with_faults(topology: Topology, faults: Mapping[int, LinkFault]) -> Topology:
    """``topology`` with ``faults`` (physical link -> fault) applied, as a new topology with
    its own routes; ``topology`` itself is not changed. Faults it already carries stay, a
    link given again takes its new fault, and ``LinkFault()`` heals a link. An empty
    ``faults`` returns ``topology`` itself."""
    if not faults:
        return topology
    merged = dict(topology.faults)
    for link, fault in faults.items():
        if not isinstance(fault, LinkFault):
            raise UserError(f"a link fault is a LinkFault, not {type(fault).__name__}")
        merged[check_link_index(topology, link)] = fault
    kept = {link: fault for link, fault in sorted(merged.items()) if fault != LinkFault()}
    # ``kept`` is a plain dict: picklable. The copy is another object, so it gets its own
    # router (routes round its cut links), built here as a built topology's is.
    faulted = dataclasses.replace(topology, faults=kept)
    router_of(faulted)
    return faulted
