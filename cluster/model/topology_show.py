"""Show a topology: a JSON-ready summary and a plain-text rendering.

:func:`summarize` condenses a :class:`~cluster.model.topology.Topology` into a dict of plain
numbers and strings (what ``topology show`` prints): IPUs, processors, cards/machines,
servers, IPU-Link domains, nodes, links per type, sync costs and a bisection bandwidth.
Bandwidths are decimal GB/s (1e9 bytes/s) per direction, latencies and syncs nanoseconds.
Everything is vectorised over links and IPUs, so a 65,536-IPU POD summarises in well under
a second. The DOT drawings are :mod:`cluster.model.rack_drawing` (one node per IPU) and
:mod:`cluster.model.unit_drawing` (one per card or machine).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np

from cluster.model.costmodel import max_min_rates
from cluster.model.routing import Router, router_of
from cluster.model.topology import ROLES, Topology
from cluster.model.units import GB, NANOSECOND


def _clean(value: float) -> float:
    """Round away float noise (``300.00000000000006 -> 300.0``), keeping 12 significant digits."""
    return float(f"{value:.12g}")


def _router(topology: Topology) -> Router:
    """The topology's router (built with it)."""
    return router_of(topology)


def bisection_bandwidth_Bps(topology: Topology) -> float:
    """Bisection bandwidth in bytes/s, one direction, under this project's router and cost model.

    Split the IPUs along ``topology.ring_order`` into a first half (positions ``0 .. h-1``,
    ``h = N // 2``) and a second half. Every IPU at ring position ``p < h`` sends one flow to
    the IPU at position ``p + h`` (a shift permutation, first half to second half only; with
    an odd ``N`` the last IPU of the ring sits out). The flows follow ``topology.router``'s
    routes and share links max-min fairly (:func:`cluster.model.costmodel.max_min_rates`); the
    bisection bandwidth is the sum of their rates. It is 0 for a single IPU. It measures
    what the *routes* achieve, so an unbalanced routing shows up as a lower figure.
    """
    half = topology.ipu_count // 2
    if half == 0:
        return 0.0
    ring = np.asarray(topology.ring_order, dtype=np.int64)
    routes = _router(topology).route(ring[:half], ring[half:2 * half])
    used_links, compact = np.unique(routes.pair_link, return_inverse=True)
    capacity_Bps = topology.directed_bandwidth_Bps[used_links]
    rates = max_min_rates(half, routes.pair_flow, compact.ravel(), capacity_Bps)
    return float(rates.sum())


def _link_records(topology: Topology) -> list[dict[str, Any]]:
    """One record per link type in use: physical links (bundle members), bundles, speeds."""
    types = len(topology.link_types)
    members = np.bincount(topology.link_type, weights=topology.link_count, minlength=types)
    bundles = np.bincount(topology.link_type, minlength=types)
    records = []
    for index, link_type in enumerate(topology.link_types):
        if bundles[index] == 0:
            continue
        roles = np.unique(topology.link_role[topology.link_type == index])
        records.append({
            "type": link_type.name,
            "count": int(members[index]),
            "bundles": int(bundles[index]),
            "bandwidth_GBps_per_direction": _clean(link_type.bandwidth_Bps / GB),
            "latency_ns": _clean(link_type.latency_seconds / NANOSECOND),
            "role": "+".join(ROLES[int(r)] for r in roles),
        })
    return records


def summarize(topology: Topology) -> dict[str, Any]:
    """A JSON-ready summary of ``topology``.

    Keys: ``name``; ``ipus``; ``processors`` (IPUs per processor name); ``units``
    (cards/machines per kind); ``servers`` (per kind); ``ipu_link_domains``; ``nodes`` (per
    node kind); ``links`` (a list, one record per link type: ``type``, ``count`` = physical
    links with every bundle member counted, ``bundles``, ``bandwidth_GBps_per_direction`` of
    one link, ``latency_ns`` of one traversal, ``role``); ``sync_ns`` (``local``,
    ``global``: BSP sync inside one IPU-Link domain / across domains); and
    ``bisection_bandwidth_GBps`` (see :func:`bisection_bandwidth_Bps`).
    """
    return {
        "name": topology.name,
        "ipus": int(topology.ipu_count),
        "processors": dict(Counter(p.name for p in topology.ipu_processors)),
        "units": dict(Counter(u.kind for u in topology.units)),
        "servers": dict(Counter(s.kind for s in topology.servers)),
        "ipu_link_domains": int(_router(topology).domain_count),
        "nodes": dict(Counter(topology.node_kinds)),
        "links": _link_records(topology),
        "sync_ns": {
            "local": _clean(topology.sync_local_seconds / NANOSECOND),
            "global": _clean(topology.sync_global_seconds / NANOSECOND),
        },
        "bisection_bandwidth_GBps": _clean(bisection_bandwidth_Bps(topology) / GB),
    }


def _counts(counts: dict[str, int]) -> str:
    """``{'C2': 8} -> '8 C2'``; several kinds are comma-separated; none is ``'none'``."""
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none"


def _processors(counts: dict[str, int]) -> str:
    """``{'GC2': 16} -> 'GC2'``; a mix is counted: ``'16 GC2, 4 GC200'``."""
    return next(iter(counts)) if len(counts) == 1 else _counts(counts)


def _gbps(value: float) -> str:
    """GB/s with 6 significant digits, never in e-notation (``15.7538``, ``204800``)."""
    return f"{value:g}" if value < 1e6 else f"{value:.0f}"


def _latency(ns: float) -> str:
    """A latency in ns below a microsecond, else in us (``300 ns``, ``1.5 us``)."""
    return f"{ns:g} ns" if ns < 1000 else f"{ns / 1000:g} us"


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned lines; columns in ``right`` are right-aligned (numbers)."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if c in right else cell.ljust(w)
                      for c, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in rows]


def render_text(summary: dict[str, Any]) -> str:
    """A readable plain-text rendering of a :func:`summarize` dict (no trailing newline)."""
    sync = summary["sync_ns"]
    facts = [
        ["IPUs", f"{summary['ipus']} ({_processors(summary['processors'])})"],
        ["units", _counts(summary["units"])],
        ["servers", _counts(summary["servers"])],
        ["IPU-Link domains", str(summary["ipu_link_domains"])],
        ["nodes", _counts(summary["nodes"])],
        ["sync", f"local {_latency(sync['local'])}, global {_latency(sync['global'])}"],
        ["bisection bandwidth", f"{_gbps(summary['bisection_bandwidth_GBps'])} GB/s "
                                "(ring halves, shift by N/2, one direction)"],
    ]
    rows = [["type", "count", "bundles", "GB/s per direction", "latency", "role"]]
    rows += [[r["type"], str(r["count"]), str(r["bundles"]),
              _gbps(r["bandwidth_GBps_per_direction"]), _latency(r["latency_ns"]), r["role"]]
             for r in summary["links"]]
    lines = [f"Topology {summary['name']}"]
    lines += ["  " + line for line in _table(facts, right=set())]
    lines += ["", "Links"]
    table = _table(rows, right={1, 2, 3, 4}) if len(rows) > 1 else ["none"]
    lines += ["  " + line for line in table]
    return "\n".join(lines)


def render_json(summary: dict[str, Any]) -> str:
    """The summary as indented JSON."""
    return json.dumps(summary, indent=2)
