"""``cluster.model.graph`` gives exactly SciPy's ``csgraph`` results (BFS orders,
predecessors, component labels, all-pairs predecessor tables), ties included, so routes
between IPUs do not change when routing stops importing SciPy. SciPy is the reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse import coo_matrix, csgraph

from cluster.model.graph import (
    NO_PATH,
    Graph,
    all_pairs_predecessors,
    bfs_distances,
    bfs_predecessor_table,
    breadth_first_order,
    connected_components,
)


def scipy_graph(n, src, dst):
    """The matrix routing builds: repeated edges summed, unweighted."""
    return coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()


def both_ways(pairs):
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return np.concatenate([pairs[:, 0], pairs[:, 1]]), np.concatenate([pairs[:, 1], pairs[:, 0]])


def ring(n, first=0):
    a = np.arange(n) + first
    return [(int(x), int(first + (x - first + 1) % n)) for x in a]


def ladder(rungs, closed, first=0):
    """Two rows of IPUs, ``2i`` and ``2i + 1`` on rung ``i`` (a C2 card), joined along the
    rows: a DSS 8440 server is an open ladder of 8 rungs, an IPU-POD rack a closed one."""
    pairs = [(first + 2 * i, first + 2 * i + 1) for i in range(rungs)]
    last = rungs if closed else rungs - 1
    for i in range(last):
        j = (i + 1) % rungs
        pairs += [(first + 2 * i, first + 2 * j), (first + 2 * i + 1, first + 2 * j + 1)]
    return pairs


def torus(rows, cols):
    node = np.arange(rows * cols).reshape(rows, cols)
    right = np.stack([node, np.roll(node, -1, axis=1)], axis=-1).reshape(-1, 2)
    down = np.stack([node, np.roll(node, -1, axis=0)], axis=-1).reshape(-1, 2)
    return np.concatenate([right, down])


def shuffled(n, edges, seed):
    """The same edges in another order, some repeated: the order must not matter."""
    src, dst = edges
    rng = np.random.default_rng(seed)
    idx = np.concatenate([rng.permutation(len(src)), rng.integers(0, len(src), len(src) // 3)])
    return n, np.asarray(src)[idx], np.asarray(dst)[idx]


def forest_one_way():
    """A network tree as routing builds it: each link once, parent -> child or back."""
    rng = np.random.default_rng(7)
    parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, 40)])
    child = np.arange(1, 40)
    flip = rng.random(len(child)) < 0.5
    src = np.where(flip, child, parent[1:])
    dst = np.where(flip, parent[1:], child)
    second = [(40 + i, 40 + (i - 1) // 2) for i in range(1, 15)]  # a binary tree
    s2, d2 = np.array(second).T
    return 60, np.concatenate([src, s2]), np.concatenate([dst, d2])  # 55..59 isolated


GRAPHS = {
    "ring of 2": (2, *both_ways(ring(2))),
    "ring of 4": (4, *both_ways(ring(4))),
    "ring of 8 (ring8.yaml)": (8, *both_ways(ring(8))),
    "four rings of 4 (two-level.yaml)": (16, *both_ways([e for k in range(4)
                                                          for e in ring(4, 4 * k)])),
    "ring of 1024 (ring1024.yaml)": (1024, *both_ways(ring(1024))),
    "dss8440: open ladder of 8 cards": (16, *both_ways(ladder(8, closed=False))),
    "dss8440x2: two open ladders": (32, *both_ways(ladder(8, False) + ladder(8, False, 16))),
    "pod16: closed ladder of 8": (16, *both_ways(ladder(8, closed=True))),
    "pod64: closed ladder of 32": (64, *both_ways(ladder(32, closed=True))),
    "pod256: four closed ladders": (256, *both_ways([e for k in range(4)
                                                     for e in ladder(32, True, 64 * k)])),
    "torus 4x6": (24, *both_ways(torus(4, 6))),
    "torus 16x16": (256, *both_ways(torus(16, 16))),
    "one-way ring of 9": (9, *np.array(ring(9)).T),
    "shuffled repeated ladder": shuffled(16, both_ways(ladder(8, True)), seed=1),
    "repeated edges, self-loops, isolated nodes": (
        12, np.array([0, 0, 0, 3, 3, 5, 5, 5, 7, 9, 9]),
        np.array([1, 1, 3, 0, 3, 6, 6, 5, 5, 9, 2])),
    "star (uneven degrees)": (50, *both_ways([(0, i) for i in range(1, 50)])),
    "forest, links one way": forest_one_way(),
    "no edges": (5, np.zeros(0, np.int64), np.zeros(0, np.int64)),
    "one node": (1, np.zeros(0, np.int64), np.zeros(0, np.int64)),
}


def some_sources(n):
    return sorted({0, n // 3, n // 2, n - 1} | set(range(0, n, max(1, n // 9))))


def assert_components_like_scipy(n, src, dst):
    count, labels = connected_components(n, src, dst)
    ref_count, ref_labels = csgraph.connected_components(scipy_graph(n, src, dst),
                                                         directed=False)
    assert count == ref_count
    assert labels.dtype == ref_labels.dtype
    np.testing.assert_array_equal(labels, ref_labels)


def assert_bfs_like_scipy(n, src, dst, sources):
    graph, ref = Graph(n, src, dst), scipy_graph(n, src, dst)
    for directed in (True, False):
        for s in sources:
            order, pred = breadth_first_order(graph, s, directed)
            ref_order, ref_pred = csgraph.breadth_first_order(ref, s, directed=directed)
            np.testing.assert_array_equal(order, ref_order)
            np.testing.assert_array_equal(pred, ref_pred)
            assert pred.dtype == ref_pred.dtype
        table = bfs_predecessor_table(graph, sources, directed)
        ref_table = np.stack([csgraph.breadth_first_order(ref, s, directed=directed)[1]
                              for s in sources])
        np.testing.assert_array_equal(table, ref_table)


def assert_all_pairs_like_scipy(n, src, dst, methods=("auto", "D", "FW")):
    graph, ref = Graph(n, src, dst), scipy_graph(n, src, dst)
    for method in methods:
        pred = all_pairs_predecessors(graph, method)
        _, ref_pred = csgraph.shortest_path(ref, method=method, unweighted=True, directed=True,
                                            return_predecessors=True)
        assert pred.dtype == ref_pred.dtype
        np.testing.assert_array_equal(pred, ref_pred, err_msg=method)


@pytest.mark.parametrize("name", GRAPHS)
def test_hop_distances_match_scipy(name):
    n, src, dst = GRAPHS[name]
    sources = some_sources(n) if n else []
    ref = csgraph.shortest_path(scipy_graph(n, src, dst), unweighted=True, directed=True,
                                indices=sources)
    want = np.where(np.isinf(ref), -1, ref).astype(np.int32)
    np.testing.assert_array_equal(bfs_distances(Graph(n, src, dst), sources),
                                  want.reshape(len(sources), n))


@pytest.mark.parametrize("name", GRAPHS)
def test_components_are_numbered_by_lowest_node_like_scipy(name):
    assert_components_like_scipy(*GRAPHS[name])


@pytest.mark.parametrize("name", GRAPHS)
def test_bfs_order_and_parents_match_scipy_both_directed_and_undirected(name):
    n, src, dst = GRAPHS[name]
    assert_bfs_like_scipy(n, src, dst, some_sources(n))


@pytest.mark.parametrize("name", GRAPHS)
def test_all_pairs_predecessors_match_scipy_shortest_path_ties_included(name):
    n, src, dst = GRAPHS[name]
    methods = ("auto",) if n > 300 else ("auto", "D", "FW")  # FW is O(n^3): keep it quick
    assert_all_pairs_like_scipy(n, src, dst, methods)


def test_dijkstra_ties_go_to_the_largest_neighbour_and_floyd_warshall_ties_do_not():
    graph = Graph(4, *both_ways(ring(4)))  # 0-1-2-3-0: two shortest paths from 0 to 2
    assert all_pairs_predecessors(graph, "D")[0, 2] == 3
    assert all_pairs_predecessors(graph, "FW")[0, 2] == 1
    assert all_pairs_predecessors(graph)[0, 2] == 1  # 8 edges >= 16 / 4: SciPy picks FW


def test_bfs_ties_go_to_the_first_node_in_queue_order():
    order, pred = breadth_first_order(Graph(4, *both_ways(ring(4))), 0)
    assert order.tolist() == [0, 1, 3, 2]
    assert pred.tolist() == [NO_PATH, 0, 1, 0]


def test_undirected_bfs_scans_out_neighbours_before_in_neighbours_like_scipy():
    # 0 -> 5 and 2 -> 0: SciPy reaches 5 (out-row) before 2 (in-row), unlike a merged row.
    order, _ = breadth_first_order(Graph(6, [0, 2], [5, 0]), 0, directed=False)
    assert order.tolist() == [0, 5, 2]


def test_unreached_nodes_and_sources_have_no_predecessor():
    graph = Graph(5, [0, 1], [1, 2])
    _, pred = breadth_first_order(graph, 0)
    assert pred.tolist() == [NO_PATH, 0, 1, NO_PATH, NO_PATH]
    table = all_pairs_predecessors(graph)
    assert (np.diag(table) == NO_PATH).all()
    assert table[2, 0] == NO_PATH


def test_edges_outside_the_graph_are_refused():
    with pytest.raises(ValueError, match="endpoints"):
        Graph(3, [0, 3], [1, 0])
    with pytest.raises(ValueError, match="length"):
        Graph(3, [0, 1], [1])


@pytest.mark.parametrize("seed", range(6))
def test_seeded_random_sparse_graphs_match_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    m = int(rng.integers(n // 2, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    assert_components_like_scipy(n, src, dst)
    assert_bfs_like_scipy(n, src, dst, some_sources(n))
    assert_all_pairs_like_scipy(n, src, dst, ("auto", "D"))


def test_large_torus_bfs_table_matches_scipy():
    n = 64 * 64
    src, dst = both_ways(torus(64, 64))
    sources = list(range(0, n, 97))
    graph, ref = Graph(n, src, dst), scipy_graph(n, src, dst)
    table = bfs_predecessor_table(graph, sources)
    ref_table = np.stack([csgraph.breadth_first_order(ref, s, directed=True)[1]
                          for s in sources])
    np.testing.assert_array_equal(table, ref_table)


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 40))
    m = draw(st.integers(0, 4 * n))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    if draw(st.booleans()):  # IPU-Link graphs hold both directions of every link
        src, dst = src + dst, dst + src
    return n, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)


@settings(max_examples=80, deadline=None)
@given(random_graphs())
def test_any_small_graph_matches_scipy_everywhere(graph):
    n, src, dst = graph
    assert_components_like_scipy(n, src, dst)
    assert_bfs_like_scipy(n, src, dst, list(range(n)))
    assert_all_pairs_like_scipy(n, src, dst)


@pytest.mark.parametrize("seed", range(3))
def test_row_by_row_expansion_for_uneven_degrees_gives_the_same_results(seed, monkeypatch):
    import cluster.model.graph as graph_module

    monkeypatch.setattr(graph_module, "_PAD_LIMIT", 0)  # never pad rows: the CSR path
    rng = np.random.default_rng(100 + seed)
    n = 120
    src, dst = rng.integers(0, n, 300), rng.integers(0, n, 300)
    assert Graph(n, src, dst).scan_rows(True)[2] is None
    assert_bfs_like_scipy(n, src, dst, some_sources(n))
    assert_all_pairs_like_scipy(n, src, dst, ("auto", "D"))
