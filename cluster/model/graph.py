"""Unweighted graph algorithms on NumPy edge arrays, without importing SciPy.

Routing needs connected components, breadth-first trees and an all-pairs shortest-path
predecessor table. ``scipy.sparse.csgraph`` has them, but importing SciPy costs ~0.2 s of
CLI start-up, so this module redoes the three calls in vectorised NumPy with *the same
results* (node orders, predecessors, labels), so that no route changes:

* :func:`connected_components` numbers components in order of their lowest node, as
  ``connected_components(g, directed=False)`` does.
* :func:`breadth_first_order` and :func:`bfs_predecessor_table` redo
  ``breadth_first_order``'s queue BFS: a node's parent is the first node, in queue order,
  whose row (out-neighbours by index, then in-neighbours if undirected) lists it.
* :func:`all_pairs_predecessors` redoes ``shortest_path(g, unweighted=True,
  directed=True, return_predecessors=True)`` of SciPy >= 1.16. Its ``'auto'`` runs
  Floyd-Warshall when ``nnz >= n * n / 4`` (small dense domains: a ring of 8, 4 or 2),
  else Dijkstra, whose ``std::priority_queue`` of ``(-distance, node)`` pops equal
  distances largest node first: the predecessor of ``j`` is its *largest* in-neighbour
  one hop closer. (SciPy 1.10-1.15 used a Fibonacci heap and broke such ties otherwise.)

BFS runs level by level over frontiers of (source, node) pairs, many sources at once: the
Python loop is per level, never per edge. Predecessors are ``int32``, :data:`NO_PATH`
(-9999) for a source and for unreached nodes, as in SciPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # numpy.typing costs start-up time; annotations are not evaluated
    from numpy.typing import ArrayLike, NDArray

    IntArray = NDArray[np.int64]

NO_PATH = -9999  # SciPy's NULL_IDX: no predecessor (a source, or an unreached node)
_PAD_LIMIT = 4  # pad rows to the largest degree while that costs <= 4x the edges


class Graph:
    """A directed graph on nodes ``0 .. n-1`` as CSR adjacency: the out-neighbours of
    ``v`` are ``indices[indptr[v]:indptr[v + 1]]``, sorted, repeated edges merged (the
    layout of ``coo_matrix(...).tocsr()``, whose row order decides SciPy's ties)."""

    def __init__(self, n: int, src: ArrayLike, dst: ArrayLike) -> None:
        self.n = n = int(n)
        s = np.asarray(src, dtype=np.int64).ravel()
        d = np.asarray(dst, dtype=np.int64).ravel()
        if s.shape != d.shape:
            raise ValueError(f"src and dst differ in length ({len(s)} != {len(d)})")
        if len(s) and (min(s.min(), d.min()) < 0 or max(s.max(), d.max()) >= n):
            raise ValueError(f"edge endpoints must lie in 0..{n - 1}")
        keys = np.sort(s * n + d)  # by (src, dst); np.unique is slower than sort + mask
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
        self.src, self.indices = keys // max(n, 1), keys % max(n, 1)
        self.indptr = np.searchsorted(self.src, np.arange(n + 1)).astype(np.int64)
        self._rows: dict[bool, tuple[IntArray, IntArray, NDArray[np.int32] | None]] = {}

    @property
    def nnz(self) -> int:
        """Number of distinct directed edges (self-loops included), as SciPy counts them."""
        return len(self.indices)

    def scan_rows(self, directed: bool) -> tuple[IntArray, IntArray, NDArray[np.int32] | None]:
        """``(indptr, indices, padded)``: each node's neighbours in the order SciPy's BFS
        scans them: its out-row, then (undirected) its in-row, each sorted, not merged.
        ``padded`` holds the rows as an ``(n + 1, max degree)`` array filled with ``n``
        (a sentinel node), or is None where degrees are too uneven for that."""
        if directed not in self._rows:
            n, indptr, indices = self.n, self.indptr, self.indices
            if not directed:
                row = np.concatenate([self.src, self.indices])
                col = np.concatenate([self.indices, self.src])
                part = np.repeat([0, 1], self.nnz)
                order = np.argsort((row * 2 + part) * max(n, 1) + col, kind="stable")
                indices = col[order]
                indptr = np.searchsorted(row[order], np.arange(n + 1)).astype(np.int64)
            deg = np.diff(indptr)
            width = int(deg.max()) if n else 0
            padded = None
            if width * (n + 1) <= _PAD_LIMIT * (len(indices) + n):
                padded = np.full((n + 1, max(width, 1)), n, dtype=np.int32)
                owner = np.repeat(np.arange(n), deg)
                padded[owner, np.arange(len(indices)) - indptr[owner]] = indices
            self._rows[directed] = indptr, indices, padded
        return self._rows[directed]


def connected_components(n: int, src: ArrayLike, dst: ArrayLike) -> tuple[int, NDArray[np.int32]]:
    """``(count, labels)`` of the undirected graph, components numbered in order of their
    lowest node, as SciPy's scan of nodes ``0 .. n-1`` numbers them.

    Min-label hooking with pointer jumping: each round joins every tree to a neighbouring
    tree, so O(log n) rounds of whole-array operations.
    """
    s = np.asarray(src, dtype=np.int64).ravel()
    d = np.asarray(dst, dtype=np.int64).ravel()
    parent = np.arange(n, dtype=np.int64)  # parent[v] <= v: a root is its tree's lowest node
    while True:
        ps, pd = parent[s], parent[d]
        differ = ps != pd
        if not differ.any():
            break
        lo, hi = np.minimum(ps[differ], pd[differ]), np.maximum(ps[differ], pd[differ])
        np.minimum.at(parent, hi, lo)  # hook: a root points at a smaller root
        while True:  # jump: every node straight to its root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    is_root = parent == np.arange(n)
    label = np.cumsum(is_root) - 1  # roots ascending: the lowest node's component is 0
    return int(is_root.sum()), label[parent].astype(np.int32)


def _bfs(rows: tuple[IntArray, IntArray, NDArray[np.int32] | None], sources: IntArray,
         first: bool) -> tuple[NDArray[np.int32], list[NDArray[np.int32]]]:
    """Level-synchronous BFS from each of ``sources`` (row ``i`` from ``sources[i]``).

    Returns the ``(len(sources), n)`` predecessors and, per level, the nodes reached.
    ``first``: a node's parent is the first pair in queue order reaching it (SciPy's BFS);
    else the largest node one level up (SciPy's Dijkstra). Frontier pairs stay grouped by
    source and in queue order, so first occurrences are queue BFS's discoveries.
    """
    indptr, indices, padded = rows
    n, k = len(indptr) - 1, len(sources)
    n1 = n + 1  # column n: the padding sentinel, marked seen
    key_type = np.int32 if k * n1 < 2**31 else np.int64
    pred = np.full(k * n1, NO_PATH, dtype=np.int32)
    seen = np.zeros(k * n1, dtype=bool)
    seen[n::n1] = True
    first_at = np.full(k * n1 if first else 0, np.iinfo(np.int32).max, dtype=np.int32)
    base = np.arange(k, dtype=key_type) * n1  # per frontier pair: its row's offset
    node = sources.astype(np.int32)
    seen[base + node] = True
    levels = [node]
    while len(node):
        if padded is not None:
            width = padded.shape[1]
            key = (base[:, None] + padded[node]).ravel()
            fresh = np.flatnonzero(~seen[key])
            owner = fresh // width if width > 1 else fresh
        else:
            start, deg = indptr[node], indptr[node + 1] - indptr[node]
            which = np.repeat(np.arange(len(node)), deg)
            pos = np.arange(len(which)) + np.repeat(start - np.cumsum(deg) + deg, deg)
            key = base[which] + indices[pos].astype(key_type)
            fresh = np.flatnonzero(~seen[key])
            owner = which[fresh]
        key = key[fresh]
        parent = node[owner]
        if first:  # keep each key's first occurrence, in place: queue order holds
            rank = np.arange(len(key), dtype=np.int32)
            np.minimum.at(first_at, key, rank)
            keep = np.flatnonzero(first_at[key] == rank)
        else:  # keep each key's largest parent; (key, parent) pairs are unique
            np.maximum.at(pred, key, parent)
            keep = np.flatnonzero(pred[key] == parent)
        key, owner = key[keep], owner[keep]
        seen[key] = True
        pred[key] = parent[keep]
        base = base[owner]
        node = (key - base).astype(np.int32)
        levels.append(node)
    return np.ascontiguousarray(pred.reshape(k, n1)[:, :n]), levels


def breadth_first_order(graph: Graph, source: int,
                        directed: bool = True) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """``(order, pred)`` equal to SciPy's ``breadth_first_order(g, source, directed,
    return_predecessors=True)``: the nodes reached, in BFS order, and each one's parent."""
    pred, levels = _bfs(graph.scan_rows(directed), np.array([source], dtype=np.int64), True)
    return np.concatenate(levels), pred[0]


def bfs_predecessor_table(graph: Graph, sources: ArrayLike,
                          directed: bool = True) -> NDArray[np.int32]:
    """Row ``i`` equal to SciPy's ``breadth_first_order(g, sources[i], directed)[1]``,
    all rows in one pass (one Python step per level for all sources, not per source)."""
    src = np.asarray(sources, dtype=np.int64).ravel()
    return _bfs(graph.scan_rows(directed), src, True)[0]


def all_pairs_predecessors(graph: Graph,
                           method: Literal["auto", "D", "FW"] = "auto") -> NDArray[np.int32]:
    """``pred[i, j]``: the node before ``j`` on a shortest path from ``i``; equal to SciPy's
    ``shortest_path(g, method, directed=True, unweighted=True,
    return_predecessors=True)[1]``, ``'auto'`` choosing the method as SciPy does."""
    n = graph.n
    if method == "auto":
        method = "D" if graph.nnz < n * n / 4 else "FW"
    if method == "FW":
        return _floyd_warshall(graph)
    return _bfs(graph.scan_rows(True), np.arange(n, dtype=np.int64), False)[0]


def _floyd_warshall(graph: Graph) -> NDArray[np.int32]:
    """SciPy's Floyd-Warshall, vectorised over ``(i, j)`` for each ``k``.

    Step ``k`` never changes row or column ``k`` (``dist[k, k] = 0``), so its in-place
    loop equals this whole-matrix form; a pair takes ``pred[k, j]`` only on a strict
    improvement, as in SciPy. O(n^3) work in n NumPy steps: meant for small dense graphs.
    """
    n = graph.n
    dtype, inf = (np.int16, 16000) if n < 8000 else (np.int32, 2**30)  # inf + inf fits
    dist = np.full((n, n), inf, dtype=dtype)
    pred = np.full((n, n), NO_PATH, dtype=np.int32)
    dist[graph.src, graph.indices] = 1
    pred[graph.src, graph.indices] = graph.src
    np.fill_diagonal(dist, 0)
    np.fill_diagonal(pred, NO_PATH)
    cand = np.empty_like(dist)
    better = np.empty((n, n), dtype=bool)
    for k in range(n):
        np.add(dist[:, k, None], dist[k], out=cand)
        np.less(cand, dist, out=better)
        np.copyto(dist, cand, where=better)
        np.copyto(pred, pred[k].copy(), where=better)
    return pred


def bfs_distances(graph: Graph, sources: ArrayLike) -> NDArray[np.int32]:
    """``dist[i, v]``: the fewest edges from ``sources[i]`` to ``v`` (-1: unreachable),
    all sources in one level-synchronous pass."""
    indptr, indices, _ = graph.scan_rows(True)
    src = np.asarray(sources, dtype=np.int64).ravel()
    n = graph.n
    dist = np.full(len(src) * n, -1, dtype=np.int32)
    key = np.arange(len(src), dtype=np.int64) * n + src
    dist[key] = 0
    level = 0
    while len(key):
        level += 1
        row, node = np.divmod(key, n)
        deg = indptr[node + 1] - indptr[node]
        which = np.repeat(np.arange(len(key)), deg)
        pos = np.arange(len(which)) + np.repeat(indptr[node] - np.cumsum(deg) + deg, deg)
        reached = row[which] * n + indices[pos]
        key = np.unique(reached[dist[reached] < 0])
        dist[key] = level
    return dist.reshape(len(src), n)
