"""One POD over a Ray cluster of three nodes on this machine, started as users start one:
`ray start --head` (no IPU resource: it only coordinates) and two `ray start --address`
nodes offering 16 IPUs each, every node on its own loopback address (127.0.0.2-4) and in
its own temp dir, all with Ray's token authentication (RAY_AUTH_MODE=token).

The pytest process already runs the session's own Ray, so the cluster is driven from
subprocesses: `ipupod bench/train/serve --ray-address`, a small driver script, and the
service's gRPC client. Each node is stopped by its process group (never `ray stop`).

Ray's own `ray.cluster_utils.Cluster` works here too (tried: with token authentication and
a node_ip_address per node, run from a process of its own), but it manages its nodes from a
driver process, which this one cannot be beside the session's Ray: it would need a helper
process kept alive for the module. `ray start` processes are what users run (the commands of
docs/real-mode.md), and losing a node is then what happens to a machine: its process group
killed.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster.service.client import Client
from ipupod_proto import control_pb2
from tests.test_link_tls import tls  # noqa: F401 - the fixture: a CA and a device certificate
from tests.test_ray_cluster import free_port, ray_cli, stop_node

ROOT = Path(__file__).resolve().parent.parent
IPUPOD = [sys.executable, "-m", "cluster.cli.main"]
HEAD_IP, WORKER_IPS = "127.0.0.2", ("127.0.0.3", "127.0.0.4")
IPUS_PER_WORKER = 16  # one DSS 8440 server: 8 C2 cards of 2 IPUs
NODE_START_SECONDS = 120.0
NODE_LOSS_NAMED_SECONDS = 10.0  # issue 32: a lost node is named within 10 s
RECOVERY_SECONDS = 180.0
# Ray's own detection of a dead node (health checks), shortened so that the test's
# recovery does not wait 30 s: the emulator names the loss by itself, sooner.
HEAD_SYSTEM_CONFIG = '{"health_check_period_ms": 1000, "health_check_failure_threshold": 3}'
AGENT_PORTS = ("node-manager-port", "object-manager-port", "metrics-export-port",
               "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
               "runtime-env-agent-port")

DRIVER = """
import json, sys
import numpy as np
from ipu_node.links.link_tls import LinkTLS
from ipu_node.pod import EmulatedPod
tls = LinkTLS(*sys.argv[2:5]) if len(sys.argv) > 2 else None
pod = EmulatedPod.launch("dss8440x2", ray_address=sys.argv[1], link_tls=tls)
rng = np.random.default_rng(7)
inputs = [rng.standard_normal(1000).astype(np.float32) for _ in range(32)]
summed = pod.collective("allreduce", inputs).results
gathered = pod.collective("allgather", [np.full(3, i, dtype=np.int32) for i in range(32)]).results
report = {
    "nodes": [pod.node_of(i) for i in range(len(pod.specs))],
    "names": [spec.name for spec in pod.specs],
    "peers": pod.roster.peer_addresses(),
    "allreduce_ok": all(np.allclose(r, np.sum(inputs, axis=0), rtol=1e-5, atol=1e-4)
                        for r in summed),
    "allgather_ok": all(np.array_equal(np.ravel(g), np.repeat(np.arange(32), 3))
                        for g in gathered),
}
pod.shutdown()
print(json.dumps(report))
"""

# launches a POD, says where server s1 runs, waits for a line on stdin (its node is stopped
# meanwhile), then starts a collective and prints how it failed
AFTER_LOSS_DRIVER = """
import json, sys, time
import numpy as np
from ipu_node.device_errors import DeviceError
from ipu_node.pod import EmulatedPod
pod = EmulatedPod.launch("dss8440x2", ray_address=sys.argv[1])
inputs = [np.full(256, i, dtype=np.float32) for i in range(32)]
pod.collective("allreduce", inputs)
s1 = next(i for i, spec in enumerate(pod.specs) if spec.name.startswith("s1."))
print(json.dumps({"node": pod.node_of(s1)}), flush=True)
sys.stdin.readline()
started = time.monotonic()
try:
    pod.collective("allreduce", inputs)
    message = "it succeeded"
except DeviceError as error:
    message = str(error)
print(json.dumps({"message": message, "seconds": time.monotonic() - started}), flush=True)
"""


@dataclass
class RayCluster:
    """A head and worker nodes, each a `ray start --block` process group."""

    root: Path
    env: dict
    address: str = ""
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)  # by node IP

    def start_node(self, ip: str, ipus: int, *extra: str) -> None:
        folder = self.root / ip.rsplit(".", 1)[1]
        folder.mkdir(exist_ok=True)
        log = folder / "start.log"
        ports = [f"--{name}={free_port()}" for name in AGENT_PORTS]
        with log.open("w") as out:
            self.nodes[ip] = subprocess.Popen(
                [ray_cli(), "start", "--block", "--num-cpus=1", f"--node-ip-address={ip}",
                 f"--resources={json.dumps({'IPU': ipus})}", f"--temp-dir={folder}",
                 "--disable-usage-stats", *ports, *extra],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + NODE_START_SECONDS
        while "Ray runtime started" not in log.read_text():  # it has joined the cluster
            if self.nodes[ip].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Ray node {ip} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)

    def start_worker(self, ip: str) -> None:
        self.start_node(ip, IPUS_PER_WORKER, f"--address={self.address}")

    def stop(self, ip: str) -> None:
        stop_node(self.nodes.pop(ip), self.root / ip.rsplit(".", 1)[1])


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    root = Path(tempfile.mkdtemp(prefix="ipm", dir="/tmp"))  # short: Ray's socket paths
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_TMPDIR": str(root),
           "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    cluster = RayCluster(root, env)
    port = free_port()
    cluster.address = f"{HEAD_IP}:{port}"
    try:
        cluster.start_node(HEAD_IP, 0, "--head", f"--port={port}", "--include-dashboard=false",
                           f"--ray-client-server-port={free_port()}",
                           f"--system-config={HEAD_SYSTEM_CONFIG}")
        for ip in WORKER_IPS:
            cluster.start_worker(ip)
        yield cluster
    finally:
        for ip in [ip for ip in cluster.nodes if ip != HEAD_IP]:
            cluster.stop(ip)
        if HEAD_IP in cluster.nodes:
            cluster.stop(HEAD_IP)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def ipupod(cluster: RayCluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*IPUPOD, *args], cwd=ROOT, env=cluster.env, capture_output=True,
                          text=True, timeout=timeout)


def test_a_server_no_node_can_hold_is_refused_before_anything_starts(ray_cluster):
    run = ipupod(ray_cluster, "bench", "allreduce", "--topology", "pod64", "--mode", "real",
                 "-b", "1K", "-e", "1K", "--ray-address", ray_cluster.address)
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert ("rack r0 needs 64 IPU resources (16 IPU-M2000s) on one Ray node; the largest of "
            "the 3 nodes offers 16: add a node with --resources '{\"IPU\": 64}' or pass "
            "--allow-split-server") in run.stderr
    split = ipupod(ray_cluster, "bench", "allreduce", "--topology", "pod64", "--mode", "real",
                   "-b", "1K", "-e", "1K", "--ray-address", ray_cluster.address,
                   "--allow-split-server")
    assert split.returncode == 2, split.stderr[-3000:]  # allowed to split, but 64 > 32 IPUs
    assert "pod64 needs 64 IPU resources but the Ray cluster has 32 free" in split.stderr


@pytest.mark.parametrize("with_tls", [False, True], ids=["plain", "tls"])
def test_each_server_on_one_node_links_across_nodes_over_tcp_results_exact(ray_cluster,
                                                                           with_tls, request):
    certificates = request.getfixturevalue("tls") if with_tls else None
    files = ([certificates.cert_file, certificates.key_file, certificates.ca_file]
             if certificates else [])
    run = subprocess.run([sys.executable, "-c", DRIVER, ray_cluster.address, *files], cwd=ROOT,
                         env=ray_cluster.env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["allreduce_ok"] and report["allgather_ok"]
    node_of = dict(zip(report["names"], map(tuple, report["nodes"])))
    servers = {server: {node for name, node in node_of.items() if name.startswith(server)}
               for server in ("s0.", "s1.")}
    assert all(len(nodes) == 1 for nodes in servers.values())  # cards and host together
    assert {ip for (_, ip) in servers["s0."] | servers["s1."]} == set(WORKER_IPS)
    for mine, peers in zip(report["names"], report["peers"]):
        for theirs, address in zip(report["names"], peers):
            if node_of[mine] == node_of[theirs] and not with_tls:
                assert address.startswith("unix:")  # TLS has no Unix socket: TCP everywhere
            else:  # TCP on the peer's node address
                assert address.startswith(node_of[theirs][1] + ":")


def test_real_training_across_nodes_matches_the_single_process_reference(ray_cluster):
    run = ipupod(ray_cluster, "train", "--mode", "real", "--servers", "2", "--steps", "2",
                 "--check", "--json", "--ray-address", ray_cluster.address)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads(run.stdout)
    assert record["replicas_identical"] is True and record["reference_max_rel_error"] < 1e-6


@pytest.fixture
def service(ray_cluster, tmp_path):
    """`ipupod serve` of a dss8440x2 on the cluster, with metrics; stopped by SIGINT."""
    token, metrics_port = tmp_path / "token", free_port()
    serve = subprocess.Popen(
        [*IPUPOD, "serve", "--topology", "dss8440x2", "--ray-address", ray_cluster.address,
         "--port", "0", "--metrics-port", str(metrics_port), "--token-file", str(token)],
        cwd=ROOT, env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        line = serve.stdout.readline()  # the first line says where it serves
        found = re.search(r" on 127\.0\.0\.1:(\d+);", line)
        assert found, line + serve.stderr.read()[-3000:]
        port = int(found.group(1))
        yield {"client": Client("127.0.0.1", port, token), "port": port, "token": token,
               "metrics_port": metrics_port, "process": serve}
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=120)


def partitions(client: Client) -> dict[str, control_pb2.Partition]:
    listed = client.call("ListPartitions", control_pb2.ListPartitionsRequest())
    return {p.name: p for p in listed.partitions}


def wait_for(what: str, check, deadline_seconds: float, poll_seconds: float = 0.5):
    """``check()``'s first true answer within ``deadline_seconds``, else a failure."""
    limit, last = time.monotonic() + deadline_seconds, None
    while time.monotonic() < limit:
        last = check()
        if last:
            return last
        time.sleep(poll_seconds)
    pytest.fail(f"{what}: not within {deadline_seconds:g} s (last answer: {last!r})")


def test_service_names_nodes_survives_losing_one_and_heals_when_it_returns(ray_cluster,
                                                                           service):
    client = service["client"]
    for name in ("left", "right"):
        client.call("CreatePartition", control_pb2.CreatePartitionRequest(name=name, size=16))
    devices = client.call("ListDevices", control_pb2.ListDevicesRequest()).devices
    node_of = {p: {(d.node_id, d.node_ip) for d in devices if d.partition == p}
               for p in ("left", "right")}
    assert all(len(nodes) == 1 for nodes in node_of.values())  # a partition = one server here
    (right_id, right_ip), = node_of["right"]
    server = next(d.server for d in devices if d.partition == "right")
    assert re.fullmatch(r"[0-9a-f]{8}", right_id) and right_ip in WORKER_IPS
    assert node_of["left"] != node_of["right"]
    listing = ipupod(ray_cluster, "devices", "--port", str(service["port"]), "--token-file",
                     str(service["token"]))
    assert f"{right_id}@{right_ip}" in listing.stdout, listing.stderr
    as_json = json.loads(ipupod(ray_cluster, "devices", "--json", "--port",
                                str(service["port"]), "--token-file",
                                str(service["token"])).stdout)
    assert {(d["node_id"], d["node_ip"]) for d in as_json["devices"]} == (node_of["left"]
                                                                         | node_of["right"])
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{service['metrics_port']}/metrics", timeout=30).read().decode()
    assert re.search(rf'ipupod_ipu_health\{{[^}}]*node="{right_id}",node_ip="{right_ip}"',
                     metrics)

    bench = subprocess.Popen(  # a long run of collectives on the partition that will lose its node
        [*IPUPOD, "bench", "allreduce", "--partition", "right", "--mode", "real", "-b", "4M",
         "-e", "4M", "-n", "2000", "--port", str(service["port"]), "--token-file",
         str(service["token"])], cwd=ROOT, env=ray_cluster.env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    time.sleep(5)  # under way
    assert bench.poll() is None, bench.communicate()
    ray_cluster.stop(right_ip)
    lost = time.monotonic()
    note = (f"node {right_id} ({right_ip}) lost: cards {server}.card0..{server}.card7; "
            f"host {server}.host")
    wait_for("the lost node named", lambda: note in partitions(client)["right"].health_detail,
             NODE_LOSS_NAMED_SECONDS)
    named_seconds = time.monotonic() - lost
    _, err = bench.communicate(timeout=60)  # the collective failed, it did not hang
    assert bench.returncode != 0 and note in err, err[-3000:]  # it says why
    table = partitions(client)
    assert table["right"].health == "unhealthy" and table["left"].health == "healthy"
    assert client.call("GetStatus", control_pb2.StatusRequest()).devices == 18  # answering

    ray_cluster.start_worker(right_ip)  # the node returns (a new Ray node, same address)
    wait_for("the partition healthy again",
             lambda: partitions(client)["right"].health == "healthy", RECOVERY_SECONDS, 2.0)
    again = ipupod(ray_cluster, "bench", "allreduce", "--partition", "right", "--mode", "real",
                   "-b", "1M", "-e", "1M", "--json", "--port", str(service["port"]),
                   "--token-file", str(service["token"]))
    assert again.returncode == 0, again.stderr[-3000:]
    assert all(row["wrong"] == 0 for row in json.loads(again.stdout))
    moved = client.call("ListDevices", control_pb2.ListDevicesRequest()).devices
    assert {d.node_id for d in moved if d.partition == "right"} != {right_id}  # a new node
    print(f"node loss named after {named_seconds:.1f} s; the bench said: {err.strip()}")


def test_a_collective_started_after_a_node_is_gone_names_the_lost_node(ray_cluster):
    driver = subprocess.Popen([sys.executable, "-c", AFTER_LOSS_DRIVER, ray_cluster.address],
                              cwd=ROOT, env=ray_cluster.env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = next((line for line in driver.stdout if line.startswith('{"node"')), "")
        assert line, driver.communicate(timeout=60)[1][-3000:]
        node_id, node_ip = json.loads(line)["node"]
        ray_cluster.stop(node_ip)  # gone before the collective starts
        out, err = driver.communicate("go\n", timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
        for ip in WORKER_IPS:
            if ip not in ray_cluster.nodes:
                ray_cluster.start_worker(ip)  # the next tests have both workers again
    assert driver.returncode == 0, err[-3000:]
    # Ray may print its own warnings (lagging heartbeats) on the driver's stdout too
    failed = json.loads(next(line for line in reversed(out.splitlines())
                             if line.startswith('{"message"')))
    assert failed["message"].startswith(
        f"node {node_id} ({node_ip}) lost: cards s1.card0..s1.card7; host s1.host: "), failed
    print(f"a collective started after node {node_id} was lost failed after "
          f"{failed['seconds']:.2f} s: {failed['message']}")
