"""The POD service on a real gRPC server: every status code, the token check, health and
reflection, the CLI client, and 200 generated hostile requests that never take it down."""

import json
import os
import pty
import re
import select
import stat
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.service.control_server import start_server
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("svc") / "token"
    pod = EmulatedPod.launch("pod16")
    token = write_token(token_file)
    server, port, metrics_port = start_server(pod, token, "127.0.0.1", 0, metrics_port=0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield {"port": port, "metrics_port": metrics_port, "token": token, "token_file": token_file,
           "pod": pod,
           "channel": channel,
           "stub": control_pb2_grpc.ControlStub(channel),
           "auth": (("authorization", f"Bearer {token}"),)}
    channel.close()
    server.stop(1).wait(3)
    server.metrics_server.shutdown()
    pod.shutdown()


def code_of(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except grpc.RpcError as error:
        return error.code(), error.details()
    return grpc.StatusCode.OK, ""


def test_the_token_file_is_readable_only_by_its_owner(service):
    mode = stat.S_IMODE(os.stat(service["token_file"]).st_mode)
    assert mode == 0o600


def test_calls_without_the_right_token_are_unauthenticated(service):
    stub = service["stub"]
    assert (code_of(stub.GetStatus, control_pb2.StatusRequest())[0]
            == grpc.StatusCode.UNAUTHENTICATED)
    code, details = code_of(stub.GetStatus, control_pb2.StatusRequest(),
                            metadata=(("authorization", "Bearer nope"),))
    assert code == grpc.StatusCode.UNAUTHENTICATED and "token" in details


def test_status_codes_for_partitions(service):
    stub, auth = service["stub"], service["auth"]
    create = lambda **k: code_of(stub.CreatePartition,  # noqa: E731
                                 control_pb2.CreatePartitionRequest(**k), metadata=auth)
    assert create(name="train", size=8)[0] == grpc.StatusCode.OK
    assert create(name="train", size=2)[0] == grpc.StatusCode.ALREADY_EXISTS
    assert create(name="bad name", size=2)[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert create(name="three", size=3)[0] == grpc.StatusCode.INVALID_ARGUMENT
    code, details = create(name="huge", size=16)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "free" in details
    ref = control_pb2.PartitionRef(name="ghost")
    assert code_of(stub.GetPartition, ref, metadata=auth)[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(stub.RemovePartition, ref, metadata=auth)[0] == grpc.StatusCode.NOT_FOUND
    listed = stub.ListPartitions(control_pb2.ListPartitionsRequest(), metadata=auth)
    assert [p.name for p in listed.partitions] == ["train"]
    devices = stub.ListDevices(control_pb2.ListDevicesRequest(), metadata=auth).devices
    assert sum(d.partition == "train" for d in devices) == 8
    assert all(d.health == "healthy" and d.ipu_type == "GC200" for d in devices)
    stub.RemovePartition(control_pb2.PartitionRef(name="train"), metadata=auth)


def test_benchmarks_run_on_a_partition_and_a_late_answer_is_deadline_exceeded(service):
    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="bench", size=4), metadata=auth)
    try:
        result = stub.RunBenchmark(control_pb2.BenchmarkRequest(
            partition="bench", collective="allreduce", min_bytes=65536, mode="real"),
            metadata=auth)
        assert result.ipus == 4 and result.rows[0].wrong == 0
        links = stub.ListLinks(control_pb2.ListLinksRequest(), metadata=auth).links
        assert sum(link.bytes_carried for link in links) > 0
        code, _ = code_of(stub.RunBenchmark, control_pb2.BenchmarkRequest(
            partition="bench", min_bytes=1 << 20, max_bytes=64 << 20, mode="real"),
            metadata=auth, timeout=0.05)
        assert code == grpc.StatusCode.DEADLINE_EXCEEDED
        code, details = code_of(stub.RunBenchmark, control_pb2.BenchmarkRequest(
            partition="bench", collective="gather", min_bytes=8), metadata=auth)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "unknown collective" in details
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="bench"), metadata=auth)


def test_health_and_reflection_answer(service):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    check = health_pb2_grpc.HealthStub(service["channel"]).Check(
        health_pb2.HealthCheckRequest(service="ipupod.control.v1.Control"),
        metadata=service["auth"])
    assert check.status == health_pb2.HealthCheckResponse.SERVING
    stub = reflection_pb2_grpc.ServerReflectionStub(service["channel"])
    answers = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
        metadata=service["auth"])
    names = {s.name for answer in answers for s in answer.list_services_response.service}
    assert "ipupod.control.v1.Control" in names


def cli(service, *args):
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"])}
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_the_cli_drives_the_service(service):
    assert cli(service, "partition", "create", "cli-p", "--size", "4").returncode == 0
    listed = json.loads(cli(service, "partition", "list", "--json").stdout)
    assert [p["name"] for p in listed["partitions"]] == ["cli-p"]
    assert "cli-p" in cli(service, "devices").stdout
    shown = cli(service, "partition", "show", "cli-p").stdout
    assert "IPU-Link domain size (ILD): 4 IPUs" in shown, shown
    assert re.search(r"units: r0\.m\d+\n", shown), shown  # one IPU-Machine
    assert re.search(r"ring: (\d+) -> \d+ -> \d+ -> \d+ -> \1$", shown, re.M), shown
    assert "ipu-link" in cli(service, "links").stdout
    assert "pod16" in cli(service, "status").stdout
    bench = cli(service, "bench", "allreduce", "--partition", "cli-p", "-b", "1M", "-e", "1M")
    assert bench.returncode == 0 and "partition cli-p (4 IPUs)" in bench.stdout
    again = cli(service, "partition", "create", "cli-p", "--size", "4")
    assert again.returncode == 2 and "ALREADY_EXISTS" in again.stderr
    assert "Traceback" not in again.stderr
    assert cli(service, "partition", "remove", "cli-p").returncode == 0


def test_vipu_verbs_devices_in_bytes_people_read_and_links_filtered(service):
    made = cli(service, "create", "partition", "verbs", "--size", "4")
    assert made.returncode == 0, made.stderr
    listed = cli(service, "list", "partitions").stdout
    assert re.search(r"^verbs\s+4\s+1\s+\d+-\d+", listed, re.M), listed  # IPUs as a range
    assert "IPU-Link domain size (ILD): 4 IPUs" in cli(service, "show", "partition",
                                                        "verbs").stdout
    devices = cli(service, "devices").stdout.splitlines()
    assert devices[0].split()[-4:] == ["used", "free", "capacity", "node"]
    assert any(line.split()[-2].endswith("M") and "verbs" in line for line in devices[1:]), devices
    assert all(re.fullmatch(r"[0-9a-f]{8}@[0-9.]+", line.split()[-1]) for line in devices[1:])
    every = cli(service, "links").stdout.splitlines()[1:]
    mine = cli(service, "links", "--partition", "verbs").stdout.splitlines()[1:]
    machine = cli(service, "links", "--device", "r0.m0").stdout.splitlines()[1:]
    rails = cli(service, "links", "--type", "ipu-link").stdout.splitlines()[1:]
    assert 0 < len(mine) < len(every) and 0 < len(machine) < len(every)
    assert all("r0.m0." in line.split()[0] + line.split()[1] for line in machine)
    assert rails and all(line.split()[2] == "ipu-link" for line in rails)
    nothing = cli(service, "links", "--type", "carrier-pigeon")
    assert nothing.returncode == 2 and "no link matches" in nothing.stderr
    assert "1 partition," in cli(service, "status").stdout  # not "1 partitions"
    mixed = cli(service, "bench", "allreduce", "--partition", "verbs", "--topology", "pod64")
    assert mixed.returncode == 2 and "belong to the service" in mixed.stderr
    assert cli(service, "remove", "partition", "verbs").returncode == 0


def read_terminal(argv, env, timeout=60.0):
    """Run ``argv`` on a pseudo-terminal, as a person would see it; all it drew."""
    master, slave = pty.openpty()
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    drawn, limit = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < limit:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the program ended: the terminal is closed
                    break
                if not chunk:
                    break
                drawn += chunk
            elif process.poll() is not None:
                break
    finally:
        os.close(master)
        process.kill() if process.poll() is None else None
        process.wait(timeout=10)
    return process.returncode, drawn.decode(errors="replace")


def test_monitor_redraws_partitions_devices_and_link_traffic_in_place(service):
    assert cli(service, "partition", "create", "watched", "--size", "4").returncode == 0
    real = cli(service, "bench", "allreduce", "--partition", "watched", "--mode", "real",
               "-b", "64K", "-e", "64K")
    assert real.returncode == 0, real.stderr
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"])}
    status, drawn = read_terminal([sys.executable, "-m", "cluster.cli.main", "monitor",
                                   "--count", "3", "--interval", "0.3"], env)
    assert status == 0, drawn[-2000:]
    frames = drawn.split("\x1b[H\x1b[2J")[1:]
    assert len(frames) == 3, drawn[-2000:]  # each frame drawn over the last
    for number, frame in enumerate(frames, 1):
        assert "# ipupod monitor: pod16, 16 IPUs" in frame and f"frame {number}" in frame
        assert re.search(r"watched\s+4 IPUs", frame), frame
        assert "r0.m0" in frame and "busiest links" in frame
        assert "ipu-link" in frame
    assert cli(service, "partition", "remove", "watched").returncode == 0


def test_the_cli_says_when_no_service_answers(tmp_path):
    token = tmp_path / "token"
    token.write_text("x")
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "status", "--port", "1",
                          "--token-file", str(token)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "is `ipupod serve` running?" in run.stderr


ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED}
hostile_names = st.one_of(st.text(max_size=80), st.sampled_from(
    ["", " ", "分区", "a" * 65, "../etc", "x\n", "\x00", "ok-name", "ok.name"]))
big_numbers = st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=hostile_names, size=big_numbers, gcds=big_numbers)
def test_hostile_partition_requests_get_the_right_errors(service, name, size, gcds):
    stub, auth = service["stub"], service["auth"]
    request = control_pb2.CreatePartitionRequest(name=name, size=size, gcds=gcds)
    code, _ = code_of(stub.CreatePartition, request, metadata=auth)
    assert code in ALLOWED
    if code == grpc.StatusCode.OK:
        stub.RemovePartition(control_pb2.PartitionRef(name=name), metadata=auth)
    code, _ = code_of(stub.GetPartition, control_pb2.PartitionRef(name=name), metadata=auth)
    assert code in ALLOWED


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(collective=st.one_of(st.text(max_size=20), st.sampled_from(["allreduce", "all-to-all"])),
       min_bytes=st.integers(0, 2**64 - 1), max_bytes=st.integers(0, 2**64 - 1),
       factor=st.floats(allow_nan=True, allow_infinity=True),
       words=st.lists(st.text(max_size=12), min_size=5, max_size=5),
       root=st.integers(0, 2**32 - 1),
       runs=st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1),
                      st.sampled_from([{}, {"check": True}, {"check": False}])))
def test_hostile_benchmark_requests_get_the_right_errors_and_the_service_lives(
        service, collective, min_bytes, max_bytes, factor, words, root, runs):
    stub, auth = service["stub"], service["auth"]
    found = code_of(stub.GetPartition, control_pb2.PartitionRef(name="fuzz"), metadata=auth)[0]
    if found != grpc.StatusCode.OK:
        stub.CreatePartition(control_pb2.CreatePartitionRequest(name="fuzz", size=4),
                             metadata=auth)
    algorithm, dtype, op, group, partition = words
    request = control_pb2.BenchmarkRequest(
        partition=partition if partition else "fuzz", collective=collective,
        min_bytes=min_bytes, max_bytes=max_bytes, factor=factor, algorithm=algorithm,
        dtype=dtype, op=op, mode="phantom", group=group, root=root, iterations=runs[0],
        warmup=runs[1], **runs[2])
    code, details = code_of(stub.RunBenchmark, request, metadata=auth, timeout=60)
    assert code in ALLOWED
    if not (0 <= runs[0] <= 10_000 and 0 <= runs[1] <= 10_000):
        assert code != grpc.StatusCode.OK
        if code == grpc.StatusCode.INVALID_ARGUMENT and "runs per size" in details:
            assert "10,000" in details  # says what it may be
    assert stub.GetStatus(control_pb2.StatusRequest(), metadata=auth).ipus == 16


def test_device_manager_acquires_a_partition_and_gives_it_back(service, monkeypatch):
    from cluster.service.device_manager import DeviceManager

    monkeypatch.setenv("IPUOF_VIPU_API_PORT", str(service["port"]))
    monkeypatch.delenv("IPUOF_VIPU_API_PARTITION_ID", raising=False)
    manager = DeviceManager(token_file=str(service["token_file"]))
    with manager.acquireAvailableDevice(numIpus=8) as device:
        assert device.numIpus == 8 and len(device.ipus) == 8
        result = device.bench("allreduce", min_bytes=1 << 20)
        assert result.ipus == 8 and result.rows[0].sim_seconds > 0
        assert [r.ipu for r in result.ranks] == device.ipus  # rank r on the r-th IPU
        real = device.bench("allreduce", min_bytes=1 << 16, mode="real", iterations=2,
                            check=False).rows[0]
        assert real.wrong == real.in_place_wrong == -1 and real.in_place_wall_seconds > 0
    listed = service["stub"].ListPartitions(control_pb2.ListPartitionsRequest(),
                                            metadata=service["auth"])
    assert device.id not in [p.name for p in listed.partitions]


def test_the_device_manager_example_runs_against_the_service(service):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"]), "PYTHONPATH": str(root)}
    env.pop("IPUOF_VIPU_API_PARTITION_ID", None)
    run = subprocess.run([sys.executable, str(root / "examples" / "device_manager.py"), "4"],
                         capture_output=True, text=True, timeout=120, cwd=root, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert re.match(r"device popart-\d+-\d+: IPUs \[\d+, \d+, \d+, \d+\]$", lines[0]), lines
    assert [line.split()[0] for line in lines[1:]] == [str(1 << 20), str(4 << 20),
                                                       str(16 << 20)]
    assert all("simulated" in line and "GB/s" in line for line in lines[1:])
    listed = service["stub"].ListPartitions(control_pb2.ListPartitionsRequest(),
                                            metadata=service["auth"])
    assert not [p.name for p in listed.partitions if p.name.startswith("popart-")]


def test_device_manager_takes_the_partition_named_in_the_environment(service, monkeypatch):
    from cluster.errors import UserError
    from cluster.service.device_manager import DeviceManager

    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="given", size=4), metadata=auth)
    monkeypatch.setenv("IPUOF_VIPU_API_PORT", str(service["port"]))
    monkeypatch.setenv("IPUOF_VIPU_API_PARTITION_ID", "given")
    manager = DeviceManager(token_file=str(service["token_file"]))
    device = manager.acquireAvailableDevice(numIpus=4)
    assert device.id == "given"
    device.detach()  # not ours: it stays
    assert stub.GetPartition(control_pb2.PartitionRef(name="given"), metadata=auth).size == 4
    with pytest.raises(UserError, match="has 4 IPUs, not the 8"):
        manager.acquireAvailableDevice(numIpus=8)
    stub.RemovePartition(control_pb2.PartitionRef(name="given"), metadata=auth)


def test_ipupod_serve_runs_until_sigterm_and_stops_cleanly(tmp_path):
    import re
    import signal
    import socket

    token = tmp_path / "token"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    server = subprocess.Popen([sys.executable, "-m", "cluster.cli.main", "serve", "--topology",
                               "pod16", "--port", "0", "--metrics-port", "0", "--token-file",
                               str(token)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=env)
    try:
        line = server.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+); token in (\S+)", line)
        assert match, line
        port = match.group(1)
        status = subprocess.run([sys.executable, "-m", "cluster.cli.main", "status", "--port", port,
                                 "--token-file", str(token), "--json"], capture_output=True,
                                text=True, timeout=60)
        assert json.loads(status.stdout)["ipus"] == 16
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        assert "stopped" in server.stdout.read()
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", int(port))) != 0
    finally:
        if server.poll() is None:
            server.kill()


def test_bytes_that_are_not_protobuf_do_not_take_the_service_down(service):
    raw = service["channel"].unary_unary("/ipupod.control.v1.Control/CreatePartition")
    for garbage in (b"\xff\xff\xff\xff", b"\x0a\xff\xff\xff\xff\x0f", b"\x00" * 1000):
        code, _ = code_of(raw, garbage, metadata=service["auth"], timeout=10)
        assert code not in (grpc.StatusCode.OK, grpc.StatusCode.UNAVAILABLE)
    status = service["stub"].GetStatus(control_pb2.StatusRequest(), metadata=service["auth"])
    assert status.ipus == 16


def scrape(service) -> str:
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{service['metrics_port']}/metrics", timeout=30) as reply:
        return reply.read().decode()


def test_the_metrics_endpoint_reports_ipus_links_and_collectives(service):
    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="metrics", size=4),
                         metadata=auth)
    try:
        stub.RunBenchmark(control_pb2.BenchmarkRequest(partition="metrics", min_bytes=65536,
                                                       mode="real"), metadata=auth)
        text = scrape(service)
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="metrics"), metadata=auth)
    for name in ("ipupod_ipu_memory_capacity_bytes", "ipupod_ipu_health",
                 "ipupod_ipu_supersteps_total", "ipupod_link_bytes_total",
                 "ipupod_link_sim_busy_seconds_total", "ipupod_collective_runs_total",
                 "ipupod_collective_sim_duration_seconds_bucket",
                 "ipupod_collective_wall_duration_seconds_count", "ipupod_partitions",
                 "ipupod_actor_restarts_total", 'ipupod_faults_total{kind="link_cut"}'):
        assert name in text, name
    assert 'ipupod_collective_runs_total{algorithm=' in text and 'partition="metrics"' in text
    carried = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("ipupod_link_bytes_total{")]
    assert sum(carried) > 0


def dashboard_expressions() -> list[str]:
    from pathlib import Path

    exprs = []
    folder = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "dashboards"
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        panels = list(board.get("panels", []))
        while panels:
            panel = panels.pop()
            panels.extend(panel.get("panels", []))
            exprs += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
    return exprs


def substitute(expr: str) -> str:
    import re

    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    expr = expr.replace("$__range", "5m")
    return re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)


def test_every_dashboard_query_returns_data_from_a_real_prometheus(service, tmp_path):
    import shutil
    import socket
    import time
    from urllib.parse import quote
    from urllib.request import urlopen

    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("Prometheus is not installed (Debian package 'prometheus'; .ci/run "
                    "installs it when it runs as root)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "prometheus.yml"
    config.write_text("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                      "scrape_configs:\n  - job_name: ipupod\n    static_configs:\n"
                      f"      - targets: ['127.0.0.1:{service['metrics_port']}']\n")
    server = subprocess.Popen([binary, f"--config.file={config}",
                               f"--storage.tsdb.path={tmp_path / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stub, auth = service["stub"], service["auth"]
    try:
        stub.CreatePartition(control_pb2.CreatePartitionRequest(name="dash", size=8),
                             metadata=auth)
        for _ in range(4):  # runs spread over several scrapes, so rates have two samples
            stub.RunBenchmark(control_pb2.BenchmarkRequest(
                partition="dash", min_bytes=65536, max_bytes=1 << 20, factor=4, mode="real"),
                metadata=auth)
            time.sleep(2)

        def query(expr):
            url = f"http://127.0.0.1:{port}/api/v1/query?query={quote(expr)}"
            with urlopen(url, timeout=30) as reply:
                return json.loads(reply.read())

        exprs = dashboard_expressions()
        assert len(exprs) >= 8
        empty = [e for e in exprs if not query(substitute(e))["data"]["result"]]
        assert empty == [], f"queries without data: {empty}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        stub.RemovePartition(control_pb2.PartitionRef(name="dash"), metadata=auth)


def test_a_second_server_on_a_taken_port_is_refused(service):
    from cluster.errors import UserError
    from cluster.service.ports import check_port_free

    with pytest.raises(UserError, match="is another service using it"):
        check_port_free("127.0.0.1", service["port"], "--port")
    with pytest.raises(UserError, match="is the port in use"):
        start_server(service["pod"], "another-token", "127.0.0.1", service["port"])
    status = service["stub"].GetStatus(control_pb2.StatusRequest(), metadata=service["auth"])
    assert status.ipus == 16  # the first service still answers its own clients


@pytest.mark.parametrize("busy", ["--port", "--metrics-port"])
def test_a_serve_whose_port_is_busy_fails_at_once_and_leaves_the_token_alone(tmp_path, busy):
    import socket

    token = tmp_path / "token"
    token.write_text("the first service's token\n")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = str(holder.getsockname()[1])
        ports = {"--port": "0", "--metrics-port": "0", busy: taken}
        run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "serve", "--topology",
                              "pod16", "--token-file", str(token),
                              *[item for pair in ports.items() for item in pair]],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert f"cannot listen on 127.0.0.1:{taken}" in run.stderr and busy in run.stderr
    assert "Traceback" not in run.stderr and "ray" not in run.stderr.lower()
    assert token.read_text() == "the first service's token\n"


def test_tokens_are_written_atomically_in_a_private_folder_replacing_a_symlink(tmp_path,
                                                                                monkeypatch):
    from cluster.service.token_auth import default_token_file, read_token, save_token

    monkeypatch.delenv("IPUPOD_TOKEN_FILE", raising=False)
    monkeypatch.setenv("IPUPOD_STATE_DIR", str(tmp_path / "state"))
    first, second = default_token_file(8090), default_token_file(8091)
    assert first != second  # each service's token is its own
    save_token(first, "one", private=True)
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    second.symlink_to(victim)
    save_token(second, "two", private=True)
    assert victim.read_text() == "keep me" and not second.is_symlink()
    assert read_token(first) == "one" and read_token(second) == "two"
    assert [p.name for p in (tmp_path / "state").iterdir() if p.name.startswith(".")] == []


JUNK = st.one_of(st.text(max_size=10), st.just("9" * 3000), st.just("²"),
                 st.integers(-(10**20), 10**20).map(str))


def mostly(*valid):
    return st.integers(0, 5).flatmap(lambda n: st.sampled_from(valid) if n else JUNK)


SERVICE_COMMANDS = st.one_of(
    st.builds(lambda name, size: ["partition", "create", name, "--size", size],
              mostly("fz", "fz2"), mostly("1", "2", "4", "3", "0", "64")),
    st.builds(lambda name, size: ["create", "partition", name, "--size", size],
              mostly("fz", "fz3"), mostly("1", "2", "8")),
    st.builds(lambda name: ["partition", "show", name], mostly("fz", "nope")),
    st.builds(lambda name: ["remove", "partition", name], mostly("fz", "fz2", "fz3")),
    st.builds(lambda flag, value: ["links", flag, value],
              st.sampled_from(["--device", "--partition", "--type"]),
              mostly("r0.m0", "fz", "ipu-link")),
    st.builds(lambda name, size, op, group, runs: ["bench", "allreduce", "--partition", name,
                                                   "-b", size, "-e", size, "--op", op,
                                                   "--group", group, "-n", runs, "-w", runs],
              mostly("fz", "nope"), mostly("1K", "64K"), mostly("sum", "max"),
              mostly("all", "consecutive:2"), mostly("1", "2", "0", "10001")),
    st.just(["list", "partitions", "--json"]), st.just(["devices"]), st.just(["status"]),
    st.just(["fault", "list"]), st.just(["monitor", "--count", "1", "--interval", "0.1"]),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(SERVICE_COMMANDS)
def test_any_service_command_ends_in_a_result_or_a_one_line_error(service, capsys, argv):
    from cluster.cli.main import main

    saved = {k: os.environ.get(k) for k in ("IPUOF_VIPU_API_PORT", "IPUPOD_TOKEN_FILE")}
    os.environ.update(IPUOF_VIPU_API_PORT=str(service["port"]),
                      IPUPOD_TOKEN_FILE=str(service["token_file"]))
    try:
        try:
            main(argv)
            status = 0
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else 1
        err = capsys.readouterr().err
        assert status in (0, 2), (argv, err)
        assert "Traceback" not in err and len(err) < 2048, (argv, err)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.update({key: value})


def test_the_service_fuzz_leaves_no_partition_behind(service):
    stub, auth = service["stub"], service["auth"]
    for partition in stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                         metadata=auth).partitions:
        if partition.name.startswith("fz"):
            stub.RemovePartition(control_pb2.PartitionRef(name=partition.name), metadata=auth)
    assert not [p for p in stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                               metadata=auth).partitions
                if p.name.startswith("fz")]


def json_commands() -> set[str]:
    """Every command (space-separated path) that has a --json option, found in the CLI."""
    import click

    from cluster.cli.main import cli as root

    ctx = click.Context(root)
    found: set[str] = set()

    def walk(command, path):
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])
        elif any("--json" in p.opts for p in command.params if isinstance(p, click.Option)):
            found.add(" ".join(path))

    walk(root, [])
    return found


def test_every_json_command_prints_one_json_document(service, tmp_path, ipupod_here,
                                                     monkeypatch):
    """Each command with --json, run for real (against the service where it needs one), in
    this process (28 processes would each pay for Python and the imports): its standard
    output parses as one JSON document. A new --json command must be added."""
    monkeypatch.setenv("IPUOF_VIPU_API_PORT", str(service["port"]))
    monkeypatch.setenv("IPUPOD_TOKEN_FILE", str(service["token_file"]))
    first = json.loads(cli(service, "links", "--json").stdout)["links"][0]
    link = f"{first['source']}--{first['target']}"
    runs = {
        "bench": ["bench", "allreduce", "-b", "1K", "-e", "2K"],
        "calibrate": ["calibrate", "--model", "resnet50", "--micro-batch", "16",
                      "--measured-step-ms", "100"],
        "validate": ["validate"],
        "chakra show": ["chakra", "show", os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "chakra",
            "step")],
        "replay": ["replay", os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "chakra",
            "step"), "--topology", "pod16"],
        "train-report": ["train-report", "--servers", "1,2", "--real-up-to", "0", "--steps",
                         "2", "--out", str(tmp_path / "train")],
        "scaling-report": ["scaling-report", "--model", "resnet50", "--topologies", "pod16",
                           "--out", str(tmp_path / "scaling")],
        "pipeline-report": ["pipeline-report", "--model", "bert-large", "--topology", "pod16",
                            "--ipus-per-replica", "16", "--micro-batches", "4",
                            "--out", str(tmp_path / "pipeline")],
        "train": ["train", "--mode", "phantom", "--model", "resnet50", "--topology", "pod16",
                  "--micro-batch", "16"],
        "plan": ["plan", "--model", "gpt3-125m", "--topology", "pod16", "--global-batch",
                 "4"],
        "status": ["status"], "devices": ["devices"], "links": ["links"],
        "partition create": ["partition", "create", "js-a", "--size", "2"],
        "create partition": ["create", "partition", "js-b", "--size", "2"],
        "partition list": ["partition", "list"], "list partitions": ["list", "partitions"],
        "partition show": ["partition", "show", "js-a"],
        "show partition": ["show", "partition", "js-b"],
        "partition remove": ["partition", "remove", "js-a"],
        "remove partition": ["remove", "partition", "js-b"],
        "fault degrade": ["fault", "degrade", link, "--bandwidth-factor", "0.5"],
        "fault cut": ["fault", "cut", link],
        "fault heal": ["fault", "heal", link],
        "fault list": ["fault", "list"],
        "fault kill": ["fault", "kill", service["pod"].specs[0].name],
        "user add": ["user", "add", "js-u", "--credential-file", str(tmp_path / "u")],
        "user list": ["user", "list"],
        "user rotate": ["user", "rotate", "js-u", "--credential-file", str(tmp_path / "u")],
        "user remove": ["user", "remove", "js-u"],
    }
    assert json_commands() == set(runs)
    for name, args in runs.items():  # in this order: partitions made before shown, ...
        run = ipupod_here(*args, "--json")
        assert run.returncode == 0, f"{name}: {run.stderr[-1500:]}"
        try:
            json.loads(run.stdout)
        except json.JSONDecodeError as error:
            raise AssertionError(f"{name} --json printed {run.stdout[:300]!r}") from error
