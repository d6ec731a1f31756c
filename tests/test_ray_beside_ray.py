"""The commands beside someone else's Ray: a head started with `ray start --head` (the
address file it writes included), or only the stale file a crashed head left behind.
Without an address every command starts a private Ray of its own and leaves the other
cluster as it was; with an address it joins that one; a wrong address fails in seconds.

Each Ray here lives in a temp root of the test's own (``RAY_TMPDIR``), so the user's
``/tmp/ray`` is never read or written, and the head is stopped by its own process group.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.test_ray_cluster import free_port, ray_cli, stop_node

ROOT = Path(__file__).resolve().parent.parent
IPUPOD = [sys.executable, "-m", "cluster.cli.main"]
SNAPSHOT = """
import json, sys
import ray
from ipu_node.ray_session import ensure_ray
ensure_ray(sys.argv[1], 0)
from ray._private import state
print(json.dumps({"jobs": len(state.jobs()), "actors": len(state.actors()),
                  "resources": ray.cluster_resources()}))
"""


def environment(ray_tmpdir: Path, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(ray_tmpdir), **extra}
    env.pop("RAY_ADDRESS", None)
    return env


def snapshot(address: str, ray_tmpdir: Path) -> dict:
    """The head's jobs, actors and resources, seen by a driver that joins it (which adds
    one job of its own each time)."""
    run = subprocess.run([sys.executable, "-c", SNAPSHOT, address], cwd=ROOT, text=True,
                         env=environment(ray_tmpdir), capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def other_ray():
    """A Ray head started as a user starts one, whose temp root holds the address file
    ``ray_current_cluster`` that Ray's drivers read by default."""
    root = Path(tempfile.mkdtemp(prefix="ipb", dir="/tmp"))  # short: Ray's socket paths
    port = free_port()
    head = subprocess.Popen(
        [ray_cli(), "start", "--head", "--block", f"--port={port}", "--num-cpus=1",
         "--include-dashboard=false", "--disable-usage-stats"],
        env=environment(root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    address_file = root / "ray" / "ray_current_cluster"
    try:
        deadline = time.monotonic() + 90
        while not address_file.is_file() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert address_file.is_file(), "the Ray head wrote no address file within 90 s"
        yield address_file.read_text().strip(), root
    finally:
        stop_node(head, root)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def ipupod(args: list[str], env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*IPUPOD, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_untouched(before: dict, after: dict) -> None:
    assert after["actors"] == before["actors"]
    assert after["resources"] == before["resources"]
    assert after["jobs"] == before["jobs"] + 1  # the second snapshot's driver alone


def test_real_bench_beside_a_running_ray_starts_its_own(other_ray):
    address, root = other_ray
    before = snapshot(address, root)
    run = ipupod(["bench", "allreduce", "--topology", "dss8440", "--mode", "real",
                  "-b", "1K", "-e", "4K", "-n", "1", "-w", "0", "--json"], environment(root))
    assert run.returncode == 0, run.stderr[-3000:]
    rows = json.loads(run.stdout)
    assert [row["bytes"] for row in rows] == [1024, 2048, 4096]
    assert all(row["wrong"] == 0 for row in rows)
    assert "ipupod: using a private local Ray" in run.stderr
    assert_untouched(before, snapshot(address, root))


def test_real_training_json_stays_json_and_quiet_when_ray_would_warn(other_ray):
    """One startup slot makes the raylet warn about its workers: the warning is kept off
    the terminal (a process per device is the design), and stdout stays one document."""
    address, root = other_ray
    before = snapshot(address, root)
    run = ipupod(["train", "--mode", "real", "--servers", "2", "--gcd", "2",
                  "--gradient-accumulation", "4", "--steps", "2", "--json"],
                 environment(root, RAY_worker_maximum_startup_concurrency="1"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "worker processes have been started" not in run.stdout + run.stderr
    record = json.loads(run.stdout)
    assert record["servers"] == 2
    assert_untouched(before, snapshot(address, root))


def test_serve_beside_a_running_ray_serves_and_stops(other_ray, tmp_path):
    address, root = other_ray
    before = snapshot(address, root)
    serve = subprocess.Popen(
        [*IPUPOD, "serve", "--topology", "dss8440", "--port", "0", "--metrics-port", "-1",
         "--token-file", str(tmp_path / "token")],
        cwd=ROOT, env=environment(root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        line = serve.stdout.readline()  # the first line says where it serves
        assert line.startswith("ipupod serve: dss8440"), line + serve.stderr.read()[-2000:]
        assert (tmp_path / "token").is_file()
    finally:
        serve.send_signal(signal.SIGINT)
        out, err = serve.communicate(timeout=120)
    assert serve.returncode == 0, err[-2000:]
    assert "ipupod serve: stopped" in out
    assert "ipupod: using a private local Ray" in err
    assert_untouched(before, snapshot(address, root))


def test_a_stale_address_file_changes_nothing(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="ips", dir="/tmp"))
    try:
        (root / "ray").mkdir()
        (root / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{free_port()}")
        run = ipupod(["bench", "allreduce", "--topology", "dss8440", "--mode", "real",
                      "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"], environment(root))
        assert run.returncode == 0, run.stderr[-3000:]
        assert "ipupod: using a private local Ray" in run.stderr
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


def test_ray_turning_token_authentication_on_is_said_in_our_line_not_its_log(tmp_path):
    """With RAY_AUTH_MODE unset, Ray turns token authentication on for a new local Ray and
    logs a notice of several lines about it; the one line naming the Ray says it instead.
    Ten device processes on this machine's cores draw no warning from Ray's raylet either."""
    env = environment(tmp_path)
    env.pop("RAY_AUTH_MODE", None)
    run = ipupod(["bench", "allreduce", "--topology", "dss8440x2", "--mode", "real",
                  "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"], env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ipupod: using a private local Ray (token authentication; logs in" in run.stderr
    assert "worker processes have been started" not in run.stdout + run.stderr
    assert "Token authentication is enabled" not in run.stderr


def test_an_address_joins_that_cluster(other_ray):
    """RAY_ADDRESS names the head: the command joins it (and the head, which offers no
    IPU resources, is refused in one line)."""
    address, root = other_ray
    run = ipupod(["bench", "allreduce", "--topology", "dss8440", "--mode", "real",
                  "-b", "1K", "-e", "1K"], {**environment(root), "RAY_ADDRESS": address})
    assert run.returncode == 2, run.stderr[-3000:]
    assert f"ipupod: using the Ray cluster at {address} (RAY_ADDRESS; " in run.stderr
    assert "IPU resources" in run.stderr.strip().splitlines()[-1]


def one_error_line(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def bench_at(address: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """A real bench told to join ``address``; a hang fails the test after 30 s."""
    return ipupod(["bench", "allreduce", "--mode", "real", "-b", "1K", "-e", "1K",
                   "--ray-address", address], environment(tmp_path), timeout=30)


def test_a_closed_ray_address_fails_in_one_line(tmp_path):
    line = one_error_line(bench_at(f"127.0.0.1:{free_port()}", tmp_path))
    assert line.startswith("error: cannot reach the Ray cluster at")
    assert "connection refused" in line


def test_a_silent_server_at_the_address_fails_in_one_line(tmp_path):
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        line = one_error_line(bench_at(f"127.0.0.1:{listener.getsockname()[1]}", tmp_path))
    assert "does not answer as a Ray GCS" in line


def test_a_grpc_server_that_is_not_ray_fails_in_one_line(tmp_path):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        line = one_error_line(bench_at(f"127.0.0.1:{port}", tmp_path))
    finally:
        server.stop(None)
    assert "is a gRPC server but not a Ray GCS" in line


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", "127.0.0.1:"])
def test_a_malformed_address_is_refused(address, tmp_path):
    line = one_error_line(bench_at(address, tmp_path))
    assert "host:port" in line
