"""Simulated times equal the textbook formulas where the formulas hold, and where links are
shared the slowdown equals what max-min sharing gives, worked out by hand."""

from pathlib import Path

import pytest

from cluster.model.costmodel import REDUCE_MEMORY_PASSES
from cluster.model.presets import build_preset
from cluster.model.topology_yaml import load_yaml_topology
from gcl import plan, simulate
from gcl.collectives import collective as collective_record

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "topologies"
RING_YAML = """\
apiVersion: ipupod/v1
kind: Topology
metadata: {{name: ring{n}}}
spec:
  processor: GC200
  sync_ns: {{local: 0, global: 0}}
  memory_bandwidth_GBps: .inf
  linkTypes: [{{name: ring-link, bandwidth_GBps: {bandwidth}, latency_ns: {latency}}}]
  nodes: [{{name: ipu, kind: ipu, count: {n}}}]
  generators: [{{ring: ipu, type: ring-link}}]
"""


def ring(tmp_path, n, bandwidth_GBps=50, latency_ns=1000):
    path = tmp_path / f"ring{n}.yaml"
    path.write_text(RING_YAML.format(n=n, bandwidth=bandwidth_GBps, latency=latency_ns))
    return load_yaml_topology(path)


def sim_seconds(topology, collective, nbytes, algorithm, itemsize=4):
    """Simulated seconds for a benchmark size of ``nbytes`` (nccl-tests' meaning)."""
    count = collective_record(collective).count_for_bytes(nbytes, topology.ipu_count, itemsize)
    schedule = plan(collective, topology, count, algorithm_name=algorithm)
    return simulate(schedule, topology).sim_seconds


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 31, 64, 100, 256, 1000, 1024])
def test_ring_allreduce_takes_2_n_minus_1_times_latency_plus_a_chunk(tmp_path, n):
    a, b = 1e-6, 50e9
    topology = ring(tmp_path, n)
    for size in (4 * n, 4 * n * 1000, 4 * n * 65536):
        expected = 2 * (n - 1) * (a + size / (n * b))
        assert sim_seconds(topology, "allreduce", size, "ring") == pytest.approx(expected,
                                                                                 rel=1e-9)


def test_ring_allreduce_of_an_uneven_size_costs_the_padded_chunks(tmp_path):
    topology = ring(tmp_path, 8)
    padded_chunk_bytes = 4 * 2  # 9 floats over 8 IPUs: 2 floats per chunk
    expected = 2 * 7 * (1e-6 + padded_chunk_bytes / 50e9)
    assert sim_seconds(topology, "allreduce", 36, "ring") == pytest.approx(expected, rel=1e-9)


def test_a_bidirectional_ring_pair_halves_the_bandwidth_term(tmp_path):
    n, a, b, size = 16, 1e-6, 50e9, 64 << 20
    topology = ring(tmp_path, n)
    expected = 2 * (n - 1) * (a + size / (2 * n * b))
    assert sim_seconds(topology, "allreduce", size, "bidirectional_ring_pair") == pytest.approx(
        expected, rel=1e-9)


def test_ring_reduce_scatter_and_all_gather_take_n_minus_1_steps(tmp_path):
    n, a, b = 8, 1e-6, 50e9
    size = 8 << 20  # the whole buffer, nccl-tests' convention
    topology = ring(tmp_path, n)
    for collective in ("reduce-scatter", "all-gather"):
        expected = (n - 1) * (a + size / (n * b))
        assert sim_seconds(topology, collective, size, "ring") == pytest.approx(expected,
                                                                                rel=1e-9)


def test_halving_doubling_on_a_switch_takes_2_log_n_steps_and_the_ring_bandwidth_term():
    topology = load_yaml_topology(EXAMPLES / "switch16.yaml")
    n, a, b, size = 16, 1e-6, 12.5e9, 16 << 20
    # Partners are disjoint pairs: each flow has its sender's link up and its receiver's
    # link down to itself, two hops. Distances 8, 4, 2, 1 move S/2, S/4, S/8, S/16.
    expected = 2 * (4 * 2 * a + size * (n - 1) / (n * b))
    assert sim_seconds(topology, "allreduce", size, "halving_doubling") == pytest.approx(
        expected, rel=1e-9)


def test_hierarchical_allreduce_equals_the_two_level_formula_when_nothing_is_shared():
    topology = load_yaml_topology(EXAMPLES / "two-level.yaml")
    local, domains = 4, 4
    a_local, b_local = 300e-9, 100e9
    a_global, b_global = 2 * 1000e-9, 12.5e9  # up to the switch and down: two hops
    size = 64 << 20
    expected = (2 * (local - 1) * (a_local + size / (local * b_local))
                + 2 * (domains - 1) * (a_global + size / (local * domains * b_global)))
    assert sim_seconds(topology, "allreduce", size, "hierarchical") == pytest.approx(
        expected, rel=1e-9)


def test_hierarchical_on_two_dss8440_local_phases_follow_the_formula_and_infiniband_is_shared():
    topology = build_preset("dss8440x2")
    size = 64 << 20
    timing = simulate(plan("allreduce", topology, size // 4, algorithm_name="hierarchical"),
                      topology)
    phases = {p.label: p for p in timing.phases}
    memory = 45e12  # GC2 tiles (000)
    sync_local, sync_global = topology.sync_local_seconds, topology.sync_global_seconds

    # Local: a ring over the 16-IPU ladder, one link per hop, nothing shared. The slowest hop
    # is a rail (64 GB/s each way), 300 ns. Each step moves S/16.
    local_chunk = size / 16
    local_step = sync_local + 300e-9 + local_chunk / 64e9
    assert phases["all-gather (local)"].steps == 15
    assert phases["all-gather (local)"].step_seconds == pytest.approx(local_step, rel=1e-9)
    assert phases["reduce-scatter (local)"].step_seconds == pytest.approx(
        local_step + REDUCE_MEMORY_PASSES * local_chunk / memory, rel=1e-9)

    # Global: 16 rings of 2 servers, all at once. Each of the 16 flows per direction moves
    # S/32. On its way it meets: its card's PCIe (2 flows, 15.75 GB/s), the fabric's uplink
    # (16 flows, 4 x 15.75 GB/s) and the host's two InfiniBand adapters (16 flows, 25 GB/s).
    # InfiniBand is the bottleneck: 25/16 GB/s per flow. Eight hops of 1 us each.
    global_chunk = size / 32
    shared_rate = 2 * 12.5e9 / 16
    global_step = sync_global + 8e-6 + global_chunk / shared_rate
    assert phases["all-gather (global)"].step_seconds == pytest.approx(global_step, rel=1e-9)

    # Had every IPU its own path, the slowest link would be its card's PCIe Gen3 x16.
    pcie_gen3 = 8e9 * 16 * 128 / 130 / 8
    unshared_step = sync_global + 8e-6 + global_chunk / pcie_gen3
    slowdown = global_step / unshared_step
    assert slowdown == pytest.approx(
        (sync_global + 8e-6 + global_chunk * 16 / 25e9)
        / (sync_global + 8e-6 + global_chunk / pcie_gen3),
        rel=1e-12)
    assert 9 < slowdown < 10.1  # sharing InfiniBand 16 ways costs about ten times PCIe alone

    total = sum(p.seconds for p in timing.phases)
    assert timing.sim_seconds == pytest.approx(total, rel=1e-12)


def test_simulated_time_is_reproducible():
    topology = build_preset("pod64")
    first = sim_seconds(topology, "allreduce", 1 << 24, "auto")
    assert all(sim_seconds(topology, "allreduce", 1 << 24, "auto") == first for _ in range(3))
