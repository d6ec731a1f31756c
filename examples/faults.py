"""Inject faults into an emulated DSS 8440 and watch it cope.

    .venv/bin/python examples/faults.py

1. Degrade one IPU-Link to a quarter of its bandwidth: the same ring allreduce takes longer
   in simulated time, by exactly what the cost model says; the results do not change.
2. Cut a ladder rail: the ring routes round the other side, and the cut link carries nothing.
3. Kill a card while an allreduce runs: the allreduce fails within seconds, naming the card
   and its IPUs; Ray restarts the card (empty), the POD wires it in, and the next
   allreduce is right.

It imports the installed package: run it with the Python of the virtualenv the package is
installed in (``pip install -e .``).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TypedDict

try:
    import numpy as np

    from cluster.cli.output import errors_as_lines
    from cluster.model.link_faults import find_link
    from gcl.collectives import CollectiveName
    from ipu_node.device_errors import DeviceDied
    from ipu_node.pod import EmulatedPod
except ModuleNotFoundError as missing:  # not the Python the package is installed in
    print(f"error: cannot import {missing.name!r}: run the examples with the Python of the "
          "virtualenv the package is installed in (pip install -e .), e.g. "
          ".venv/bin/python examples/faults.py", file=sys.stderr)
    sys.exit(2)


class _Failure(TypedDict, total=False):
    """How the allreduce of step 3 failed, if it did: the error and when (monotonic s)."""

    error: DeviceDied
    at: float


def main() -> None:
    """Run the three steps of the module docstring on a dss8440, printing what happens."""
    with EmulatedPod.launch("dss8440") as pod:
        data = [np.full(1 << 20, i, dtype=np.int32) for i in range(16)]
        total = sum(range(16))
        ring = dict(algorithm="clockwise_ring")

        healthy = pod.collective(CollectiveName.ALLREDUCE, data, **ring).sim_seconds
        pod.degrade_link("s0.card0.ipu0--s0.card0.ipu1", bandwidth_factor=0.25)
        slow = pod.collective(CollectiveName.ALLREDUCE, data, **ring)
        assert all((r == total).all() for r in slow.results)
        print(f"1. rung at 1/4 bandwidth: {healthy * 1e6:.1f} us -> {slow.sim_seconds * 1e6:.1f} "
              "us simulated, results unchanged")
        pod.heal()

        rail = "s0.card2.ipu1--s0.card3.ipu1"
        pod.cut_link(rail)
        before = pod.link_bytes()
        detour = pod.collective(CollectiveName.ALLREDUCE, data, **ring)
        carried = pod.link_bytes() - before
        link = find_link(pod.base_topology, rail)
        print(f"2. {rail} cut: it carried {carried[2 * link] + carried[2 * link + 1]:.0f} bytes; "
              f"the allreduce took {detour.sim_seconds * 1e6:.1f} us simulated, "
              f"correct: {all((r == total).all() for r in detour.results)}")
        pod.heal()

        pod.put("x", [np.full(4 << 20, i, dtype=np.int32) for i in range(16)])
        failure: _Failure = {}

        def run() -> None:
            try:
                pod.collective(CollectiveName.ALLREDUCE, "x", output="y", **ring)
            except DeviceDied as error:
                failure["error"], failure["at"] = error, time.monotonic()

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.3)
        killed = time.monotonic()
        pod.kill_card("s0.card3")
        worker.join()
        if "error" in failure:
            print(f"3. after {failure['at'] - killed:.1f} s: {failure['error']}")
        else:
            print("3. the allreduce finished before the kill landed")
        while any(d.state != "healthy" for d in pod.health()):
            time.sleep(0.2)
        again = pod.collective(CollectiveName.ALLREDUCE, data, **ring)
        print(f"   card back (restarts per card: {pod.restarts}); next allreduce correct: "
              f"{all((r == total).all() for r in again.results)}")


if __name__ == "__main__":
    with errors_as_lines():
        main()
