"""The cost model's delays, pinned to values worked out by hand."""

import numpy as np
import pytest

from cluster.model.costmodel import max_min_rates, send_seconds, superstep_cost
from tests.builders import GB, chain, star

MB = 1e6


def test_one_transfer_takes_latency_plus_bytes_over_bandwidth():
    topology = chain(2, bandwidth_GBps=10, latency_seconds=1e-6)
    assert send_seconds(topology, 0, 1, 10 * MB) == pytest.approx(1e-6 + 10 * MB / (10 * GB),
                                                                   rel=1e-12)


def test_multi_hop_transfer_adds_each_hops_latency_and_runs_at_the_slowest_link():
    topology = chain(4, bandwidth_GBps=10, latency_seconds=1e-6)
    assert send_seconds(topology, 0, 3, 1 * MB) == pytest.approx(3e-6 + 1 * MB / (10 * GB),
                                                                  rel=1e-12)


def test_opposite_directions_of_a_link_do_not_share_bandwidth():
    topology = chain(2, bandwidth_GBps=10, latency_seconds=0)
    cost = superstep_cost(topology, np.array([0, 1]), np.array([1, 0]), np.array([MB, MB]))
    assert cost.exchange_seconds == pytest.approx(MB / (10 * GB), rel=1e-12)


def test_two_transfers_on_one_link_split_its_bandwidth():
    topology = chain(3, bandwidth_GBps=10, latency_seconds=0)
    # 0->2 and 1->2 share the directed link 1->2.
    cost = superstep_cost(topology, np.array([0, 1]), np.array([2, 2]), np.array([MB, MB]))
    assert cost.exchange_seconds == pytest.approx(2 * MB / (10 * GB), rel=1e-12)


def test_bandwidth_freed_by_a_finished_transfer_goes_to_the_others():
    topology = chain(2, bandwidth_GBps=10, latency_seconds=0)
    # 1 MB and 3 MB on one link: both at 5 GB/s until the small one ends at 0.2 ms, having
    # moved 1 MB of each; the remaining 2 MB go at 10 GB/s: 0.2 ms more. Total 0.4 ms.
    cost = superstep_cost(topology, np.array([0, 0]), np.array([1, 1]), np.array([MB, 3 * MB]))
    assert cost.exchange_seconds == pytest.approx(0.4e-3, rel=1e-12)


def test_max_min_fairness_gives_the_textbook_rates():
    # Links A (capacity 10) and B (capacity 4). Flow 0 uses A, flow 1 uses A and B,
    # flow 2 uses B. B is the bottleneck: flows 1 and 2 get 2 each; flow 0 gets 10 - 2 = 8.
    rates = max_min_rates(3, np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]), np.array([10.0, 4.0]))
    assert rates.tolist() == pytest.approx([8.0, 2.0, 2.0])


def test_a_switch_is_shared_only_where_links_are_shared():
    topology = star(4, bandwidth_GBps=10, latency_seconds=1e-6)
    # Disjoint pairs 0->1 and 2->3: nothing shared, each at full rate over two hops.
    apart = superstep_cost(topology, np.array([0, 2]), np.array([1, 3]), np.array([MB, MB]))
    assert apart.exchange_seconds == pytest.approx(2e-6 + MB / (10 * GB), rel=1e-12)
    # 0->3 and 1->3 meet on the switch's link down to IPU 3.
    meet = superstep_cost(topology, np.array([0, 1]), np.array([3, 3]), np.array([MB, MB]))
    assert meet.exchange_seconds == pytest.approx(2e-6 + 2 * MB / (10 * GB), rel=1e-12)


def test_reduction_time_is_three_passes_of_the_received_bytes_over_memory_bandwidth():
    topology = chain(2, bandwidth_GBps=10, latency_seconds=0)
    topology.memory_bandwidth_override_Bps = None  # back to the GC200's 47.5 TB/s
    cost = superstep_cost(topology, np.array([0]), np.array([1]), np.array([MB]), reduce=True)
    assert cost.reduce_seconds == pytest.approx(3 * MB / 47.5e12, rel=1e-12)
    assert cost.seconds == pytest.approx(MB / (10 * GB) + 3 * MB / 47.5e12, rel=1e-12)


def test_sync_is_global_when_a_transfer_leaves_its_ipu_link_domain():
    from cluster.model.presets import build_preset

    topology = build_preset("dss8440x2")
    inside = superstep_cost(topology, np.array([0]), np.array([2]), np.array([1.0]))
    across = superstep_cost(topology, np.array([0]), np.array([16]), np.array([1.0]))
    assert inside.sync_seconds == topology.sync_local_seconds
    assert across.sync_seconds == topology.sync_global_seconds


def test_bytes_are_counted_per_link_type_on_every_hop():
    topology = chain(3, bandwidth_GBps=10, latency_seconds=0)
    cost = superstep_cost(topology, np.array([0]), np.array([2]), np.array([MB]))
    assert cost.link_type_bytes == {"test-link": 2 * MB}


def test_an_empty_superstep_costs_nothing():
    topology = chain(2)
    empty = np.zeros(0, dtype=np.int64)
    assert superstep_cost(topology, empty, empty, np.zeros(0)).seconds == 0.0
