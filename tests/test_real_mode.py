"""Real mode on real local Ray and real gRPC links: every collective x algorithm gives the
reference results, the simulated time equals phantom mode's, bad input is refused before
any byte moves."""

from dataclasses import replace

import numpy as np
import pytest
import ray

from cluster.errors import ScheduleError, UserError
from gcl import plan, simulate
from gcl.algorithms import for_collective
from gcl.collectives import COLLECTIVES
from gcl.local_executor import run_in_memory
from gcl.reference import expected
from ipu_node.device_errors import DeviceError, OutOfMemory
from ipu_node.pod import EmulatedPod

TOPOLOGIES = ("dss8440", "dss8440x2", "pod16")
CASES = [(c, a.name) for c in COLLECTIVES for a in for_collective(COLLECTIVES[c])]


@pytest.fixture(scope="module")
def pods(ray_session):
    launched = {name: EmulatedPod.launch(name) for name in TOPOLOGIES}
    yield launched
    for pod in launched.values():
        pod.shutdown()


def inputs_for(pod, collective, count, dtype=np.int32, seed=0):
    n = pod.topology.ipu_count
    per = count * (n if collective in ("reduce-scatter", "all-to-all") else 1)
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "i":
        return [rng.integers(-1000, 1000, per).astype(dtype) for _ in range(n)]
    return [rng.standard_normal(per).astype(dtype) for _ in range(n)]


@pytest.mark.parametrize("topology", TOPOLOGIES)
@pytest.mark.parametrize("collective, algorithm", CASES)
def test_every_collective_and_algorithm_gives_the_reference_result(pods, topology, collective,
                                                                   algorithm):
    pod = pods[topology]
    arrays = inputs_for(pod, collective, 24)
    result = pod.collective(collective, arrays, algorithm=algorithm, root=1)
    for got, want in zip(result.results, expected(collective, arrays, "sum", 1)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_floats_are_bitwise_equal_to_the_schedule_order_reference(pods, op, dtype):
    pod = pods["dss8440x2"]
    arrays = inputs_for(pod, "allreduce", 1000, dtype, seed=3)
    result = pod.collective("allreduce", arrays, algorithm="hierarchical", op=op)
    reference = run_in_memory(result.schedule, arrays, op)
    for got, want in zip(result.results, reference):
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("group", ["consecutive:4", "orthogonal:8"])
def test_replica_groups_reduce_within_each_group(pods, group):
    pod = pods["dss8440x2"]
    arrays = inputs_for(pod, "allreduce", 50)
    result = pod.collective("allreduce", arrays, group=group)
    schedule = result.schedule
    for members in schedule.groups:
        total = np.sum([arrays[i] for i in members.tolist()], axis=0)
        for ipu in members.tolist():
            np.testing.assert_array_equal(result.results[ipu], total)


def test_real_mode_reports_phantom_modes_simulated_time_and_bytes(pods):
    pod = pods["dss8440x2"]
    arrays = inputs_for(pod, "allreduce", 4096, np.float32)
    result = pod.collective("allreduce", arrays, algorithm="hierarchical")
    phantom = simulate(plan("allreduce", pod.topology, 4096, algorithm_name="hierarchical"),
                       pod.topology)
    assert result.sim_seconds == phantom.sim_seconds
    assert result.link_type_bytes == pytest.approx(phantom.link_type_bytes)
    assert result.wall_seconds > 0


def test_tensors_stay_on_the_devices_between_collectives(pods):
    pod = pods["pod16"]
    arrays = [np.full(64, i, dtype=np.int32) for i in range(16)]
    pod.put("grad", arrays)
    result = pod.collective("allreduce", "grad", output="total")
    assert result.results == []
    assert all(np.array_equal(t, np.full(64, 120)) for t in pod.get("total"))


@pytest.mark.parametrize("op, factor", [("sum", 16), ("mean", 1)])
def test_an_allreduce_into_its_own_input_works_in_place_again_and_again(pods, op, factor):
    pod = pods["pod16"]
    pod.put("grad", [np.full(4096, i + 1, dtype=np.int32) for i in range(16)])
    expected = np.full(4096, 136 if op == "sum" else 136 // 16, dtype=np.int64)
    for run in range(3):  # the first run lays out a copy (inputs arrive read-only), then in place
        if run:
            expected = expected * factor
        pod.collective("allreduce", "grad", output="grad", op=op, algorithm="halving_doubling")
        assert all(np.array_equal(t, expected) for t in pod.get("grad"))
    other = pod.collective("allreduce", "grad", output="copy")  # the input stays as it was
    assert all(np.array_equal(t, expected) for t in pod.get("grad"))
    assert all(np.array_equal(t, expected * 16) for t in pod.get("copy"))
    assert other.results == []


@pytest.mark.parametrize("arrays, words", [
    (lambda n: [np.zeros(8, np.float32)] * (n - 1), "one array per replica"),
    (lambda n: [np.zeros(8, np.float32)] * (n - 1) + [np.zeros(9, np.float32)], "shape"),
    (lambda n: [np.zeros(8, np.float32)] * (n - 1) + [np.zeros(8, np.int32)], "dtype"),
    (lambda n: [np.zeros(8, np.float64)] * n, "not supported"),
    (lambda n: [np.zeros(0, np.float32)] * n, "empty"),
])
def test_bad_arrays_are_refused_before_any_byte_moves(pods, arrays, words):
    pod = pods["dss8440"]
    with pytest.raises(UserError, match=words):
        pod.collective("allreduce", arrays(16))


def test_blocks_that_do_not_split_and_unknown_names_are_refused(pods):
    pod = pods["dss8440"]
    with pytest.raises(UserError, match="equal blocks"):
        pod.collective("reduce-scatter", [np.zeros(17, np.float32)] * 16)
    with pytest.raises(ScheduleError, match="unknown algorithm"):
        pod.collective("allreduce", [np.zeros(8, np.float32)] * 16, algorithm="fastest")
    with pytest.raises(ScheduleError, match="unknown replica group"):
        pod.collective("allreduce", [np.zeros(8, np.float32)] * 16, group="pairs")
    with pytest.raises(ScheduleError, match="unknown reduction op 'avg'"):
        pod.collective("allreduce", [np.zeros(8, np.float32)] * 16, op="avg")
    with pytest.raises(UserError, match="no tensor 'nothing'"):
        pod.collective("allreduce", "nothing")


def test_a_tensor_larger_than_free_memory_names_the_ipu_and_the_bytes(pods):
    pod = pods["dss8440"]
    big = np.zeros(200 * 2**20, dtype=np.uint8)
    pod.put("ballast", [big], ipus=[0])
    with pytest.raises(OutOfMemory, match=r"s0.card0.ipu0: 'ballast2' needs 209,715,200 bytes"):
        pod.put("ballast2", [big], ipus=[0])
    with pytest.raises(OutOfMemory, match="s0.card0.ipu0: the collective needs"):
        pod.collective("allreduce", [np.zeros(30 * 2**20, np.float32)] * 2, ipus=[0, 1])
    pod.put("ballast", [np.zeros(1, np.uint8)], ipus=[0])  # give the memory back


def test_a_dead_card_is_named_and_nothing_hangs(ray_session):
    pod = EmulatedPod.launch("pod16")
    try:
        ray_session.kill(pod.actors[2])
        with pytest.raises(DeviceError, match="r0.m2"):
            pod.collective("allreduce", [np.ones(64, np.float32)] * 16, deadline_seconds=5)
    finally:
        pod.shutdown()


def test_shutdown_frees_the_ports_and_a_pod_can_be_launched_again(ray_session):
    import socket

    pod = EmulatedPod.launch("pod16")
    addresses = [info["address"] for info in pod.infos]
    pod.shutdown()
    for address in addresses:
        host, port = address.rsplit(":", 1)
        with socket.socket() as probe:
            assert probe.connect_ex((host, int(port))) != 0
    again = EmulatedPod.launch("pod16")
    try:
        result = again.collective("allreduce", [np.ones(4, np.int32)] * 16)
        assert result.results[0].tolist() == [16] * 4
    finally:
        again.shutdown()


def test_the_real_allreduce_example_runs_and_agrees_with_numpy():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, str(root / "examples" / "real_allreduce.py"), "pod16"],
                         capture_output=True, text=True, timeout=300, cwd=root,
                         env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "pod16: 16 IPUs on 4 devices" in run.stdout
    difference = float(run.stdout.split("NumPy ")[1].split()[0])
    assert difference < 1e-5


def test_server_hosts_are_devices_that_relay_and_count_traffic_between_servers(pods):
    pod = pods["dss8440x2"]
    assert [s.name for s in pod.specs if s.kind == "host"] == ["s0.host", "s1.host"]
    before = {s["name"]: s for s in pod.stats()}
    arrays = inputs_for(pod, "allreduce", 3200, np.float32)
    result = pod.collective("allreduce", arrays, algorithm="hierarchical")
    after = {s["name"]: s for s in pod.stats()}
    topology = pod.topology
    infiniband = np.flatnonzero([topology.link_types[t].name == "infiniband-100g"
                                 for t in topology.directed_type])
    for host in ("s0.host", "s1.host"):
        assert after[host]["relayed_bytes"] > before[host]["relayed_bytes"]
    counted_by_hosts = sum(after[h]["link_bytes"][infiniband].sum()
                           - before[h]["link_bytes"][infiniband].sum()
                           for h in ("s0.host", "s1.host"))
    counted_by_cards = sum(after[n]["link_bytes"][infiniband].sum()
                           - before[n]["link_bytes"][infiniband].sum()
                           for n in after if ".card" in n)
    assert counted_by_cards == 0
    assert counted_by_hosts == result.link_type_bytes["infiniband-100g"] > 0


def relayed(pod):
    """Bytes each host relayed, and those of them it read from shared memory, by name."""
    return {s["name"]: (s["relayed_bytes"], s["relayed_shared_bytes"]) for s in pod.stats()
            if s["name"].endswith(".host")}


def relay_through(pod, arrays):
    """A hierarchical allreduce of ``arrays`` (bit-for-bit the schedule's reference), and
    the bytes the hosts relayed in all and from shared memory meanwhile."""
    before = relayed(pod)
    result = pod.collective("allreduce", arrays, algorithm="hierarchical")
    for got, want in zip(result.results, run_in_memory(result.schedule, arrays, "sum")):
        assert got.tobytes() == want.tobytes()
    after = relayed(pod)
    return (sum(after[h][0] - before[h][0] for h in after),
            sum(after[h][1] - before[h][1] for h in after))


def test_hosts_relay_chunks_from_their_cards_through_shared_memory(pods):
    pod = pods["dss8440x2"]
    arrays = inputs_for(pod, "allreduce", 3 << 18, np.float32, seed=5)  # 3 MiB each
    total, shared = relay_through(pod, arrays)
    # every byte crosses two hosts: from a card (by reference into its buffer), then from
    # the other host (through its slots: each collective starts with them all free, and a
    # chunk that finds none taken goes inline)
    assert total // 2 < shared <= total


def test_hosts_relay_inline_with_shared_memory_switched_off(ray_session, monkeypatch):
    from ipu_node.links.shared_slots import ENV_SWITCH

    monkeypatch.setenv(ENV_SWITCH, "0")
    pod = EmulatedPod.launch("dss8440x2")
    try:
        total, shared = relay_through(pod, inputs_for(pod, "allreduce", 3 << 18, np.float32))
        assert total > 0 and shared == 0
    finally:
        pod.shutdown()


def test_inputs_too_big_for_this_machine_point_to_phantom_mode():
    from ipu_node.executor import check_replicas

    huge = [(10**11,)] * 16  # 400 GB per replica, described, never allocated
    with pytest.raises(UserError, match="use phantom mode"):
        check_replicas(huge, ["float32"] * 16, 16, 16, "allreduce")


def test_the_bench_placing_its_inputs_leaves_the_pod_knowing_them_for_one_round_trip(pods):
    from gcl.collectives import DType
    from ipu_node.real_bench import BENCH_IN, _place_inputs

    pod = pods["dss8440"]
    targets = list(range(pod.topology.ipu_count))
    _place_inputs(pod, targets, 1000, DType.FLOAT32)
    owners = sorted({pod.owner[ipu] for ipu in targets})
    for device in owners:  # what the next collective would otherwise ask each device again
        held = pod.facts.tensor(device, BENCH_IN)
        assert held is not None and all(shape == ((1000,), "float32")
                                        for shape in held.values())
        assert pod.facts.free_bytes(device) is not None
    assert sorted(ipu for d in owners for ipu in pod.facts.tensor(d, BENCH_IN)) == targets


def test_bench_runs_warmups_and_iterations_and_can_skip_the_check(pods):
    from gcl.bench_spec import BenchSpec, Runs, SizeRange
    from gcl.collectives import ALLREDUCE
    from gcl.modes import Mode
    from ipu_node.real_bench import run_real

    pod = pods["dss8440"]
    spec = BenchSpec(ALLREDUCE, SizeRange(1 << 16, 1 << 16), Mode.REAL,
                     algorithm="clockwise_ring")
    before = sum(c["supersteps"] for s in pod.stats() for c in s["counters"].values())
    [once] = run_real(pod, spec.place(pod.topology))
    middle = sum(c["supersteps"] for s in pod.stats() for c in s["counters"].values())
    thrice_spec = replace(spec, runs=Runs(iterations=2, warmup=1, check=False))
    [thrice] = run_real(pod, thrice_spec.place(pod.topology))
    after = sum(c["supersteps"] for s in pod.stats() for c in s["counters"].values())
    assert once.wrong == once.in_place_wrong == 0
    assert thrice.wrong == thrice.in_place_wrong == -1  # -1: not checked
    # each placement, out of place and in place: one warm-up and two timed runs
    assert after - middle == 3 * (middle - before)
    assert thrice.sim_seconds == once.sim_seconds
    with pytest.raises(UserError, match="-n"):
        Runs(iterations=0)
    with pytest.raises(UserError, match="-w"):
        Runs(warmup=10_001)


@pytest.mark.parametrize("collective", ["allreduce", "reduce-scatter", "all-gather"])
def test_bench_in_place_starts_each_run_from_the_inputs_and_leaves_the_result_over_them(
        pods, collective):
    from gcl.bench_rows import bench_inputs
    from gcl.bench_spec import BenchSpec, Runs, SizeRange
    from gcl.collectives import COLLECTIVES, DType
    from gcl.modes import Mode
    from ipu_node.real_bench import BENCH_IN, run_real

    pod = pods["dss8440"]
    spec = BenchSpec(COLLECTIVES[collective], SizeRange(1 << 16, 1 << 16), Mode.REAL,
                     DType.INT32, runs=Runs(iterations=3, warmup=1))
    [row] = run_real(pod, spec.place(pod.topology))
    assert row.wrong == row.in_place_wrong == 0  # not sums of sums, nor a shape gone wrong
    n = pod.topology.ipu_count
    per_replica = row.count // (n if collective == "all-gather" else 1)
    arrays = bench_inputs(per_replica, n, DType.INT32)
    for got, want in zip(pod.get(BENCH_IN), expected(collective, arrays, "sum", 0)):
        np.testing.assert_array_equal(got, want)


def test_a_tensor_changed_behind_the_pods_back_is_refused_never_reduced_wrong(pods):
    pod = pods["dss8440"]
    pod.put("known", [np.full(64, r, dtype=np.int32) for r in range(16)])
    assert pod.collective("allreduce", "known", output="known2").results == []
    # the POD now starts collectives on "known" from what it knows; change it unseen
    ray.get(pod.actors[pod.owner[0]].put.remote(0, "known", np.zeros(65, dtype=np.int32)))
    with pytest.raises(DeviceError, match="holds 65 elements of int32, but the collective "
                                          "was planned for 64"):
        pod.collective("allreduce", "known", output="known2")
    with pytest.raises(UserError, match=r"replica 0 has \(65,\)"):  # asked again
        pod.collective("allreduce", "known", output="known2")
    pod.put("known", [np.full(64, r, dtype=np.int32) for r in range(16)])
    pod.collective("allreduce", "known", output="known2")
    assert all(np.array_equal(a, np.full(64, 120)) for a in pod.get("known2"))


def test_memory_freed_behind_the_pods_back_is_asked_again_before_a_refusal(pods):
    pod = pods["dss8440"]
    pod.put("ballast", [np.zeros(200 * 2**20, dtype=np.uint8)], ipus=[0])
    small = [np.ones(16, np.float32)] * 2
    pod.collective("allreduce", small, ipus=[0, 1])  # the POD hears IPU 0 is nearly full
    ray.get(pod.actors[pod.owner[0]].free.remote(0, "ballast"))  # freed unseen
    big = [np.ones(30 * 2**20, np.float32)] * 2
    result = pod.collective("allreduce", big, ipus=[0, 1])
    assert np.all(result.results[1] == 2)


def test_a_collective_answers_what_its_devices_hold_after_it(pods):
    pod = pods["dss8440"]
    pod.put("grad", [np.full(32, r, dtype=np.float32) for r in range(16)])
    pod.collective("reduce-scatter", "grad", output="part")
    card0 = pod.owner[0]
    assert pod.facts.tensor(card0, "part") == {0: ((2,), "float32"), 1: ((2,), "float32")}
    known = pod.facts.free_bytes(card0)  # from the collective's answer (put forgot it)
    said = {ipu: m["free_bytes"] for ipu, m in pod.stats(devices=[card0])[0]["memory"].items()}
    assert known == said
    pod.call("free", {card0: (0, "part")})
    assert pod.facts.tensor(card0, "part") is None  # a call that changes a device: forgotten
