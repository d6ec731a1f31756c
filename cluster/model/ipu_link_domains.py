"""IPU-Link domains numbered locally and grouped by shape, for :mod:`cluster.model.routing`.

Domains whose IPU-Links join the same local indices (all the racks of a POD, all the
servers of a DSS 8440 cluster) share one shortest-path table: routing keeps one per shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.model.graph import Graph


@dataclass(frozen=True, eq=False)
class IpuLinkDomains:
    """The IPU-Link domains, numbered locally: ``members`` lists the IPUs domain by domain,
    domain ``d`` starting at ``start[d]``, and ``local_index[i]`` is IPU ``i``'s place in its
    domain. Domains whose IPU-Links join the same local indices share a *shape*
    (``shape_of_domain``) and so one shortest-path table, over ``shape_graph[shape]`` (all
    the racks of a POD, all the servers of a DSS 8440 cluster)."""

    members: np.ndarray
    start: np.ndarray
    local_index: np.ndarray
    shape_of_domain: np.ndarray
    shape_graph: tuple[Graph, ...]



def index_domains(domain_count: int, domain_of_ipu: np.ndarray, src: np.ndarray,
                   dst: np.ndarray) -> IpuLinkDomains:
    """Local numbering of each domain's IPUs, and domains grouped by shape (``src[k] ->
    dst[k]``: the directed IPU-Links)."""
    order = np.argsort(domain_of_ipu, kind="stable")
    sizes = np.bincount(domain_of_ipu, minlength=domain_count)
    start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    local_index = np.empty(len(order), dtype=np.int64)
    local_index[order] = np.arange(len(order)) - np.repeat(start, sizes)
    domain = domain_of_ipu[src]
    edges = np.stack([domain, local_index[src], local_index[dst]], axis=1)
    edges = edges[np.lexsort((edges[:, 2], edges[:, 1], edges[:, 0]))]
    bounds = np.searchsorted(edges[:, 0], np.arange(domain_count + 1))
    shape_ids: dict[bytes, int] = {}
    shape_of_domain = np.empty(domain_count, dtype=np.int64)
    shape_graph: list[Graph] = []
    for d in range(domain_count):
        local_edges = edges[bounds[d]:bounds[d + 1], 1:]
        key = bytes(np.int64(sizes[d])) + local_edges.tobytes()
        if key not in shape_ids:
            shape_ids[key] = len(shape_ids)
            shape_graph.append(Graph(int(sizes[d]), local_edges[:, 0], local_edges[:, 1]))
        shape_of_domain[d] = shape_ids[key]
    return IpuLinkDomains(order, start, local_index, shape_of_domain, tuple(shape_graph))
