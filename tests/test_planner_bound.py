"""The planner's shortcut: a lower bound on an algorithm's simulated time, found without
routing, lets ``auto`` skip algorithms that cannot win. The bound never exceeds the cost
model's time, and ``auto`` picks what trying every algorithm would pick."""

import numpy as np
import pytest

from cluster.model.costmodel import superstep_cost, superstep_lower_bound
from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault
from cluster.model.routing import router_of
from cluster.model.spec import load_topology
from gcl.algorithms import for_collective
from gcl.collectives import COLLECTIVES
from gcl.phantom import lower_bound_seconds, simulate
from gcl.planner import plan, plan_timed

SPECS = ["dss8440", "dss8440x2", "pod16", "examples/topologies/ring8.yaml",
         "examples/topologies/two-level.yaml", "examples/topologies/switch16.yaml",
         "pod16 with a cut and a slow link", "ring8 with a cut"]


def topology_for(spec):
    """A preset or file, or one of them with link faults (routes go round a cut)."""
    if spec == "pod16 with a cut and a slow link":
        return with_faults(load_topology("pod16"),
                           {3: LinkFault(cut=True), 5: LinkFault(bandwidth_factor=0.3)})
    if spec == "ring8 with a cut":
        return with_faults(load_topology("examples/topologies/ring8.yaml"),
                           {0: LinkFault(cut=True)})
    return load_topology(spec)


def every_algorithm(coll, topology, count):
    """(name, schedule, simulated seconds) of every algorithm that can run the request."""
    out = []
    for algorithm in for_collective(coll):
        try:
            schedule = plan(coll, topology, count, algorithm_name=algorithm.name)
        except ValueError:
            continue
        out.append((algorithm.name, schedule, simulate(schedule, topology).sim_seconds))
    return out


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_the_bound_never_exceeds_the_simulated_time(spec, name):
    topology = topology_for(spec)
    for count in (64, 1 << 18):
        for algorithm, schedule, seconds in every_algorithm(COLLECTIVES[name], topology, count):
            assert lower_bound_seconds(schedule, topology) <= seconds * (1 + 1e-12), algorithm


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_auto_picks_what_trying_every_algorithm_picks(spec, name):
    topology = topology_for(spec)
    for count in (64, 1 << 18):
        tried = every_algorithm(COLLECTIVES[name], topology, count)
        fastest = min(seconds for _, _, seconds in tried)
        first_fastest = next(a for a, _, seconds in tried if seconds == fastest)
        schedule, timing = plan_timed(COLLECTIVES[name], topology, count)
        assert (schedule.algorithm, timing.sim_seconds) == (first_fastest, fastest)


def test_the_bound_of_one_flow_is_its_bytes_over_the_link_plus_latency_and_sync():
    topology = load_topology("examples/topologies/ring8.yaml")
    link = topology.link_types[0]
    nbytes = 1e6
    bound = superstep_lower_bound(topology, np.array([0]), np.array([1]), np.array([nbytes]))
    sync = min(topology.sync_local_seconds, topology.sync_global_seconds)
    assert bound == pytest.approx(sync + nbytes / link.bandwidth_Bps + link.latency_seconds)
    actual = superstep_cost(topology, np.array([0]), np.array([1]), np.array([nbytes]))
    assert bound == pytest.approx(actual.seconds)  # a neighbour, alone: the bound is exact


def test_nothing_moving_costs_nothing():
    topology = load_topology("dss8440")
    assert superstep_lower_bound(topology, np.array([0]), np.array([1]), np.array([0.0])) == 0


def test_on_a_long_ring_the_bound_rules_out_halving_doubling_before_routing_it():
    ring = load_topology("examples/topologies/ring1024.yaml")
    count = 16 << 20  # 64 MiB of float32: congestion, not latency, decides
    schedule = plan("allreduce", ring, count, algorithm_name="halving_doubling")
    bound = lower_bound_seconds(schedule, ring)
    best, timing = plan_timed("allreduce", ring, count)
    assert best.algorithm == "bidirectional_ring_pair"
    assert timing.sim_seconds < bound <= simulate(schedule, ring).sim_seconds


def test_min_hops_is_exact_on_a_ring_between_a_landmark_and_any_ipu():
    ring = load_topology("examples/topologies/ring8.yaml")
    hops = router_of(ring).min_hops(np.zeros(7, dtype=np.int64), np.arange(1, 8))
    routed = [len(router_of(ring).path(0, d)) for d in range(1, 8)]
    assert hops.tolist() == routed == [1, 2, 3, 4, 3, 2, 1]
