"""Several devices in one Ray worker process (``devices_per_process``): the same results,
fewer processes, and process-mates that fail and come back together."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from cluster.errors import UserError
from cluster.model.presets import build_preset
from ipu_node.device_errors import DeviceDied, DeviceError
from ipu_node.device_process import DeviceProcess, MemberHandle, process_mates
from ipu_node.device_spec import device_specs
from ipu_node.pod import EmulatedPod

PER_PROCESS = 4


@pytest.fixture(scope="module")
def grouped(ray_session):
    """dss8440x2 (2 servers of 8 C2 cards and a host) with 4 devices per process: each
    server's devices in processes of 4, 4 and 1 (its host)."""
    launched = EmulatedPod.launch("dss8440x2", devices_per_process=PER_PROCESS)
    yield launched
    launched.shutdown()


def _pids(pod):
    return [info["pid"] for info in pod.infos]


def _wait_healthy(pod, within_seconds: float = 60.0) -> None:
    limit = time.monotonic() + within_seconds
    while time.monotonic() < limit:
        if all(d.state == "healthy" for d in pod.health()):
            return
        time.sleep(0.2)
    raise AssertionError(f"not healthy within {within_seconds} s: {pod.health()}")


def test_a_servers_devices_share_processes_of_the_size_asked(grouped):
    pids = _pids(grouped)
    assert len(grouped.specs) == 18 and len(set(pids)) == 6
    by_server: dict[str, set[int]] = {}
    for spec, pid in zip(grouped.specs, pids):
        by_server.setdefault(spec.server, set()).add(pid)
    assert [len(p) for p in by_server.values()] == [3, 3]  # no process spans two servers
    assert len(set.union(*by_server.values())) == 6
    assert all(isinstance(handle, MemberHandle) for handle in grouped.actors[:4])
    assert process_mates(grouped.actors, 1) == [0, 1, 2, 3]


@pytest.mark.parametrize("name", ["allreduce", "reduce-scatter", "all-gather", "broadcast",
                                  "all-to-all"])
def test_collectives_over_grouped_devices_equal_numpy(grouped, name):
    rng = np.random.default_rng(3)
    ipus = grouped.topology.ipu_count
    data = [rng.integers(-100, 100, 4096 * ipus, dtype=np.int32) for _ in range(ipus)]
    result = grouped.collective(name, data)
    total = np.sum(data, axis=0)
    if name == "allreduce":
        assert all(np.array_equal(r, total) for r in result.results)
    elif name == "reduce-scatter":
        assert all(np.array_equal(r, part)
                   for r, part in zip(result.results, np.split(total, ipus)))
    elif name == "all-gather":
        assert all(np.array_equal(r, np.concatenate(data)) for r in result.results)
    elif name == "broadcast":
        assert all(np.array_equal(r, data[0]) for r in result.results)
    else:
        expected = [np.concatenate([np.split(d, ipus)[i] for d in data]) for i in range(ipus)]
        assert all(np.array_equal(r, e) for r, e in zip(result.results, expected))


def test_killing_a_grouped_card_takes_its_process_mates_down_and_back(grouped):
    rng = np.random.default_rng(5)
    ipus = grouped.topology.ipu_count
    data = [rng.integers(-100, 100, 1 << 20, dtype=np.int32) for _ in range(ipus)]
    grouped.put("x", data)
    before = _pids(grouped)
    victim = grouped.specs[1]
    health = grouped.kill_card(victim.name)
    mates = [grouped.specs[i].name for i in (0, 2, 3)]
    assert health.state == "restarting"
    assert all(name in health.detail for name in mates)
    with pytest.raises((DeviceDied, DeviceError, UserError)) as failure:
        grouped.collective("allreduce", "x", deadline_seconds=20)
    # dead or restarting, or already back without its data: a device of that process
    assert any(grouped.specs[i].name in str(failure.value) for i in range(4)), failure.value
    _wait_healthy(grouped)
    pids = [s["pid"] for s in grouped.stats()]
    assert len({pids[i] for i in range(4)}) == 1 and pids[0] != before[0]  # back together
    assert pids[4:] == before[4:]  # the other processes were not touched
    held = grouped.tensor_info("x")
    assert not any(ipu in held for i in range(4) for ipu in grouped.specs[i].ipus)
    small = [rng.integers(-100, 100, 4096, dtype=np.int32) for _ in range(ipus)]
    result = grouped.collective("allreduce", small)
    assert all(np.array_equal(r, np.sum(small, axis=0)) for r in result.results)


def test_a_process_answers_only_its_devices_public_methods():
    topology = build_preset("dss8440")
    process = DeviceProcess(device_specs(topology)[:2], topology)
    try:
        assert process.call(1, "tensor_info", "none") == {}
        with pytest.raises(DeviceError, match="holds 2 devices, not 3"):
            process.call(2, "info")
        with pytest.raises(DeviceError, match="has no method '_details'"):
            process.control(0, "_details")
        with pytest.raises(DeviceError, match="has no method 'nothing'"):
            process.call(0, "nothing")
    finally:
        for member in range(2):
            process.call(member, "shutdown")


def test_a_member_handle_refuses_a_method_its_device_lacks():
    handle = MemberHandle(process=None, member=0, kind=DeviceProcess)
    with pytest.raises(AttributeError, match="has no method 'nothing'"):
        _ = handle.nothing
    with pytest.raises(AttributeError):
        _ = handle._private


def test_a_member_handle_of_a_host_refuses_a_cards_methods():
    from ipu_node.host import HostRelay

    handle = MemberHandle(process=None, member=0, kind=HostRelay)
    for method in ("put", "get", "run", "execute"):
        with pytest.raises(AttributeError, match=f"HostRelay has no method '{method}'"):
            _ = getattr(handle, method)


def test_the_option_is_checked_and_noted_in_phantom_mode():
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "bench", "allreduce",
                          "-b", "1K", "-e", "1K", "--devices-per-process", "4"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "--devices-per-process: no devices are started" in run.stderr + run.stdout
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "bench", "allreduce",
                          "--devices-per-process", "0"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "0 is not in the range 1<=x<=64" in run.stderr


def test_a_launch_of_many_processes_says_how_to_start_fewer():
    from cluster.cli.placement_flags import Placement, process_note

    note = process_note(build_preset("pod256"), Placement())
    assert note == ("note: pod256 starts 64 device processes, about 0.6 CPU seconds each; "
                    "--devices-per-process 4 starts about 16 (docs/real-mode.md, "
                    "\"Several devices per process\")")
    assert process_note(build_preset("pod256"), Placement(devices_per_process=4)) is None
    assert process_note(build_preset("dss8440x2"), Placement()) is None  # 18 processes


def test_a_real_bench_with_grouped_devices_counts_no_wrong_elements():
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "bench", "allreduce",
                          "--mode", "real", "--topology", "dss8440", "-b", "64K", "-e", "64K",
                          "--devices-per-process", "4", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    [row] = json.loads(run.stdout)
    assert row["wrong"] == row["in_place_wrong"] == 0


@pytest.mark.parametrize("wrong", [0, -2, 1.5])
def test_a_wrong_number_of_devices_per_process_is_refused_before_anything_starts(wrong):
    with pytest.raises(UserError, match="devices_per_process must be a whole number of at least 1"):
        EmulatedPod.launch("dss8440", devices_per_process=wrong)
