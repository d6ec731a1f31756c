"""Faults through the control API and `ipupod fault`: partition health, link state, errors,
and the fault and restart counters on the metrics endpoint. A real service on the
four-server ``two-level`` example (one actor per server; servers joined by a switch)."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest

from cluster.service.control_server import start_server
from cluster.service.token_auth import write_token
from gcl.bench_rows import run_phantom
from gcl.bench_spec import BenchSpec, SizeRange
from gcl.collectives import collective
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc

SPEC = "examples/topologies/two-level.yaml"


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("faults") / "token"
    pod = EmulatedPod.launch(SPEC)
    server, port, metrics_port = start_server(pod, write_token(token_file), "127.0.0.1", 0,
                                              metrics_port=0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = control_pb2_grpc.ControlStub(channel)
    auth = (("authorization", f"Bearer {token_file.read_text().strip()}"),)
    for name, size in (("a", 8), ("b", 4)):
        stub.CreatePartition(control_pb2.CreatePartitionRequest(name=name, size=size),
                             metadata=auth)
    yield {"pod": pod, "stub": stub, "auth": auth, "port": port, "token_file": token_file,
           "metrics_port": metrics_port}
    channel.close()
    server.stop(1).wait(3)
    server.metrics_server.shutdown()
    pod.shutdown()


def cli(service, *args):
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"])}
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def health(service, name):
    found = service["stub"].GetPartition(control_pb2.PartitionRef(name=name),
                                         metadata=service["auth"])
    return found.health, found.health_detail


def metric(service, sample: str) -> float:
    url = f"http://127.0.0.1:{service['metrics_port']}/metrics"
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(sample + " ") or line.startswith(sample + "{")]
    return sum(values)


def bench(service, partition, mode="phantom"):
    return service["stub"].RunBenchmark(control_pb2.BenchmarkRequest(
        partition=partition, min_bytes=1 << 20, algorithm="clockwise_ring", mode=mode),
        metadata=service["auth"])


def test_degrade_cut_and_heal_links_from_the_cli(service):
    pod, stub, auth = service["pod"], service["stub"], service["auth"]
    assert health(service, "a") == ("healthy", "") and health(service, "b") == ("healthy", "")
    before = bench(service, "a").rows[0].sim_seconds

    run = cli(service, "fault", "degrade", "s1.ipu0--s1.ipu1", "--bandwidth-factor", "0.1",
              "--added-latency-us", "1")
    assert run.returncode == 0, run.stderr
    assert "s1.ipu0--s1.ipu1" in run.stdout and "x0.1" in run.stdout
    state, detail = health(service, "a")
    assert state == "degraded" and "s1.ipu0--s1.ipu1" in detail
    assert health(service, "b") == ("healthy", "")  # server 2 does not use that link
    link = next(l for l in stub.ListLinks(control_pb2.ListLinksRequest(), metadata=auth).links
                if {l.source, l.target} == {"s1.ipu0", "s1.ipu1"})
    assert link.state == "degraded"
    assert link.bandwidth_bytes_per_second == pytest.approx(10e9)
    assert link.latency_seconds == pytest.approx(1300e-9)
    degraded = bench(service, "a").rows[0].sim_seconds
    spec = BenchSpec(collective("allreduce"), SizeRange(1 << 20, 1 << 20),
                     algorithm="clockwise_ring")
    expected = next(run_phantom(spec.place(pod.topology, list(range(8)))))
    assert degraded == expected.sim_seconds and degraded > before

    run = cli(service, "fault", "cut", "s0.ipu0--sw")
    assert run.returncode == 0, run.stderr
    state, detail = health(service, "a")
    assert state == "unhealthy" and "s0.ipu0--sw" in detail
    with pytest.raises(grpc.RpcError) as refused:
        bench(service, "a")
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "s0.ipu0--sw" in refused.value.details()
    run = cli(service, "bench", "allreduce", "--partition", "a", "-b", "1M", "-e", "1M")
    assert run.returncode == 2 and "s0.ipu0--sw" in run.stderr
    assert "Traceback" not in run.stderr
    listed = cli(service, "fault", "list").stdout
    assert "s0.ipu0--sw" in listed and "cut" in listed and "s1.ipu0--s1.ipu1" in listed

    run = cli(service, "fault", "heal", "--all")
    assert run.returncode == 0 and "healed" in run.stdout
    assert health(service, "a") == ("healthy", "")
    assert bench(service, "a").rows[0].sim_seconds == before
    assert metric(service, 'ipupod_faults_total{kind="link_degraded"}') >= 1
    assert metric(service, 'ipupod_faults_total{kind="link_cut"}') >= 1


def test_a_killed_card_shows_in_health_restarts_and_rejoins(service):
    pod, stub, auth = service["pod"], service["stub"], service["auth"]
    card = "s2"  # partition b's IPUs 8-11
    pid = {s["name"]: s["pid"] for s in pod.stats()}[card]
    os.kill(pid, signal.SIGSTOP)  # hung: the health checks cannot reach it
    try:
        state, detail = health(service, "b")
        assert state == "unhealthy" and "s2 (IPUs 8, 9, 10, 11) is unreachable" in detail
        devices = stub.ListDevices(control_pb2.ListDevicesRequest(), metadata=auth).devices
        assert {d.health for d in devices if d.unit == card} == {"unreachable"}
    finally:
        os.kill(pid, signal.SIGCONT)
    restarts_before = metric(service, "ipupod_actor_restarts_total")
    run = cli(service, "fault", "kill", card)
    assert run.returncode == 0, run.stderr
    assert "s2 (IPUs 8, 9, 10, 11) killed" in run.stdout
    deadline = time.monotonic() + 60
    while health(service, "b")[0] != "healthy":
        assert time.monotonic() < deadline, health(service, "b")
        time.sleep(0.2)
    faults = stub.ListFaults(control_pb2.ListFaultsRequest(), metadata=auth)
    assert [(c.card, c.health, c.restarts) for c in faults.cards] == [("s2", "healthy", 1)]
    assert bench(service, "b", mode="real").rows[0].wrong == 0
    assert metric(service, 'ipupod_faults_total{kind="card_killed"}') >= 1
    assert metric(service, "ipupod_actor_restarts_total") == restarts_before + 1


def test_fault_commands_refuse_bad_input_with_a_message(service):
    for args, needle in ((("kill", "card9"), "no card or machine named 'card9'"),
                         (("degrade", "s0.ipu0--s0.ipu1", "--bandwidth-factor", "2"),
                          "--bandwidth-factor"),
                         (("degrade", "s0.ipu0--s0.ipu1", "--added-latency-us", "-1"),
                          "--added-latency-us"),
                         (("cut", "s0.ipu0--s2.ipu0"), "no link"),
                         (("heal",), "name one LINK"),
                         (("heal", "s0.ipu0--s0.ipu1"), "no fault to heal")):
        run = cli(service, "fault", *args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert needle in run.stderr, (args, run.stderr)
        assert "Traceback" not in run.stderr
