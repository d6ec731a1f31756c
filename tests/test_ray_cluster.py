"""The emulator on a Ray cluster started the way a user would: `ray start --head`, a second
node with `ray start --address ...`, both on this machine (loopback), joined by address."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DRIVER = """
import json, sys, time
import numpy as np
import ray
from ipu_node.ray_session import ensure_ray
from ipu_node.pod import EmulatedPod
ensure_ray(sys.argv[1], 32)
deadline = time.monotonic() + 90
while ray.cluster_resources().get("IPU", 0) < 32 and time.monotonic() < deadline:
    time.sleep(0.5)  # the second node is still joining
pod = EmulatedPod.launch("dss8440x2", ray_address=sys.argv[1])
result = pod.collective("allreduce", [np.full(8, i, dtype=np.int32) for i in range(32)])
print(json.dumps({"nodes": pod.nodes(), "first": result.results[0].tolist()}))
pod.shutdown()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> str:
    beside = Path(sys.executable).with_name("ray")
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def start_node(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen([ray_cli(), "start", "--block", "--num-cpus=1",
                             '--resources={"IPU": 16}', "--disable-usage-stats", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def node_ip() -> str:
    """The address Ray binds on this machine (it may not be loopback)."""
    from ray.util import get_node_ip_address

    return get_node_ip_address()


def stop_node(process: subprocess.Popen, temp_dir: Path) -> None:
    """Stop a node and every process it started (they share its process group; anything
    that left the group is found by the node's temp dir in its command line)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=30)
    for _ in range(20):  # processes that left the group: find them by the temp dir
        if subprocess.run(["pkill", "-9", "-f", str(temp_dir)], check=False).returncode:
            return  # none left
        time.sleep(0.5)


@pytest.fixture
def short_dir():
    """Ray's sockets live in its temp dir, and Unix socket paths must stay short."""
    path = Path(tempfile.mkdtemp(prefix="ipr", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_actors_spread_over_two_nodes_joined_by_address(short_dir):
    tmp_path = short_dir
    port = free_port()
    ip = node_ip()
    address = f"{ip}:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # Ray's default settings
    env.pop("RAY_ADDRESS", None)
    head = start_node(["--head", f"--port={port}", "--include-dashboard=false",
                       f"--temp-dir={tmp_path}"], env)
    worker = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait for the head's GCS to listen
            with socket.socket() as probe:
                if probe.connect_ex((ip, port)) == 0:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("the Ray head did not start within 60 s")
        # Ray 2.60 turns token auth on by default for a head only: a node that joins is
        # told to use it, as Ray's docs say (RAY_AUTH_MODE=token); the driver finds the
        # head's token by itself (ipu_node.launcher).
        worker = start_node([f"--address={address}"], {**env, "RAY_AUTH_MODE": "token"})
        run = subprocess.run([sys.executable, "-c", DRIVER, address], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
        assert report["first"] == [sum(range(32))] * 8
        nodes = report["nodes"]
        assert len(set(nodes.values())) == 2
        by_server = {server: {n for device, n in nodes.items() if device.startswith(server)}
                     for server in ("s0.", "s1.")}
        assert all(len(n) == 1 for n in by_server.values())  # cards and host on one node
        assert {"s0.host", "s1.host"} <= nodes.keys()
    finally:
        if worker is not None:
            stop_node(worker, tmp_path)
        stop_node(head, tmp_path)
