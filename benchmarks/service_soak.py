"""Service soak: several clients at once create and remove partitions and run benches on a
real service for a bounded time; counts wrong results, refusals by status, leaked IPUs and
the service's RSS over time (MiB).

    .venv/bin/python benchmarks/service_soak.py --seconds 60 --clients 4 --topology pod16
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

import grpc

from cluster.service.control_server import start_server
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc


def rss_mib() -> float:
    """This process's resident set (MiB): the service runs in it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def client(stub, auth, index: int, until: float, counts: Counter, lock: threading.Lock) -> None:
    """Create a partition, bench on it (phantom or real), remove it; again until ``until``."""
    rng = random.Random(index)
    step = 0
    while time.monotonic() < until:
        name, step = f"soak-{index}-{step}", step + 1
        outcome = []
        try:
            stub.CreatePartition(control_pb2.CreatePartitionRequest(
                name=name, size=rng.choice([1, 2, 4, 8])), metadata=auth, timeout=120)
            mode = rng.choice(["phantom", "phantom", "real"])
            result = stub.RunBenchmark(control_pb2.BenchmarkRequest(
                partition=name, min_bytes=64 << 10, max_bytes=4 << 20, factor=8,
                mode=mode, collective=rng.choice(["allreduce", "all-gather"])),
                metadata=auth, timeout=300)
            outcome.append(f"bench_{mode}")
            outcome += ["wrong_rows"] * sum(max(r.wrong, r.in_place_wrong) > 0
                                            for r in result.rows)
        except grpc.RpcError as error:
            outcome.append(f"refused_{error.code().name}")
        finally:
            try:
                stub.RemovePartition(control_pb2.PartitionRef(name=name), metadata=auth,
                                     timeout=120)
            except grpc.RpcError:
                pass
        with lock:
            counts.update(outcome)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--topology", default="pod16")
    args = parser.parse_args()
    pod = EmulatedPod.launch(args.topology)
    with TemporaryDirectory() as folder:
        token = write_token(Path(folder) / "token")
        server, port, _ = start_server(pod, token, "127.0.0.1", 0)
        stub = control_pb2_grpc.ControlStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        auth = (("authorization", f"Bearer {token}"),)
        counts: Counter = Counter()
        lock = threading.Lock()
        until = time.monotonic() + args.seconds
        threads = [threading.Thread(target=client, args=(stub, auth, i, until, counts, lock))
                   for i in range(args.clients)]
        samples = [rss_mib()]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            time.sleep(max(1.0, args.seconds / 10))
            samples.append(rss_mib())
        status = stub.GetStatus(control_pb2.StatusRequest(), metadata=auth)
        leaked = status.ipus - status.free_ipus
        print(f"{args.clients} clients, {args.seconds:.0f} s wall, {args.topology}: "
              f"{dict(sorted(counts.items()))}; leaked IPUs {leaked}; partitions left "
              f"{status.partitions}")
        print("service RSS (MiB) over time: " + ", ".join(f"{s:.0f}" for s in samples))
        server.stop(1).wait(3)
    pod.shutdown(stop_ray=True)


if __name__ == "__main__":
    main()
