"""How long a collective takes to name a Ray node that was lost before it started.

A Ray cluster of this machine's own (``ray.cluster_utils.Cluster``, Ray's default health
checks): a head offering no IPU and two nodes of 16 IPUs, each on its own loopback
address. A ``dss8440x2`` POD is launched across the two (a server per node), one allreduce
runs, then the node of server ``s1`` is removed and another allreduce is started: the
script prints the seconds until it failed and its message (which should name the node).

    python benchmarks/node_loss_time.py            # one line: seconds, then the message
    python benchmarks/node_loss_time.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IPUS_PER_NODE = 16  # one DSS 8440 server
NODE_IPS = ("127.0.0.3", "127.0.0.4")


def measure() -> dict[str, Any]:
    """Seconds from the call to the failure of an allreduce whose server's node is gone."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # as the project's Ray runs
    made = "" if "RAY_TMPDIR" in os.environ else tempfile.mkdtemp(prefix="nl", dir="/tmp")
    os.environ.setdefault("RAY_TMPDIR", made)  # short: Ray's socket paths
    import ray
    from ray.cluster_utils import Cluster

    from gcl.collectives import CollectiveName
    from ipu_node.device_errors import DeviceError
    from ipu_node.pod import EmulatedPod

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"IPU": 0}, "node_ip_address": "127.0.0.2",
        "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=1, resources={"IPU": IPUS_PER_NODE},
                                node_ip_address=ip) for ip in NODE_IPS]
    cluster.wait_for_nodes()
    try:
        pod = EmulatedPod.launch("dss8440x2", ray_address=cluster.address)
        inputs = [np.full(1024, i, dtype=np.float32) for i in range(32)]
        pod.collective(CollectiveName.ALLREDUCE, inputs)
        server1 = next(i for i, spec in enumerate(pod.specs) if spec.name.startswith("s1."))
        _, ip = pod.node_of(server1)
        cluster.remove_node(workers[NODE_IPS.index(ip)])
        started = time.monotonic()
        try:
            pod.collective(CollectiveName.ALLREDUCE, inputs)
            message = "the collective succeeded"
        except DeviceError as error:
            message = str(error)
        seconds = time.monotonic() - started
        pod.shutdown()
    finally:
        ray.shutdown()
        cluster.shutdown()
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return {"seconds": round(seconds, 2), "lost_node_ip": ip, "message": message}


def main() -> None:
    """Print the measurement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    figures = measure()
    if parser.parse_args().json:
        print(json.dumps(figures))
    else:
        print(f"{figures['seconds']:.2f} s: {figures['message']}")


if __name__ == "__main__":
    main()
