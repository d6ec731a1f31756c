"""What real mode's wall-clock recording (``--trace`` with ``--mode real``) costs a
collective, against the same collective unrecorded in the same run.

A 16 MiB float32 allreduce over the 16 IPUs of ``pod16`` (inputs on the IPUs, the result
left there, in place), ``--runs`` times with the actors' recorders off and as many with
them on, alternately (a recorder is turned on before, and its spans taken after, each
recorded run, outside the timed part). Prints each way's median wall seconds and their
ratio, how many spans a recorded run keeps, and what a check of a recorder that is off
costs (the price an unrecorded run pays at each place a span could start). Goal: off
costs nothing measurable (the recorders are off unless a trace asks); on, within a few
percent.

    python benchmarks/wall_trace_cost.py            # a table
    python benchmarks/wall_trace_cost.py --json     # the same as JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALLREDUCE_BYTES = 16 << 20
TENSOR = "cost.in"


def measure(runs: int) -> dict[str, Any]:
    """Median wall seconds of the allreduce with the recorders off and on."""
    import ray

    from gcl.collectives import CollectiveName
    from ipu_node.pod import EmulatedPod
    from ipu_node.wall_trace import WallRecorder

    pod = EmulatedPod.launch("pod16")
    try:
        n = pod.topology.ipu_count
        pod.put(TENSOR, [np.ones(ALLREDUCE_BYTES // 4, dtype=np.float32)] * n)
        pod.collective(CollectiveName.ALLREDUCE, TENSOR, output=TENSOR)  # warm the links
        walls: dict[str, list[float]] = {"off": [], "on": []}
        spans = 0
        for _ in range(runs):
            for way in ("off", "on"):
                wall = WallRecorder()
                if way == "on":
                    wall.start(pod)
                started = time.perf_counter()
                pod.collective(CollectiveName.ALLREDUCE, TENSOR, output=TENSOR)
                walls[way].append(time.perf_counter() - started)
                if way == "on":
                    wall.stop(pod)
                    spans = sum(len(answer["spans"]) for answer in wall.recorded.values())
    finally:
        pod.shutdown()
        ray.shutdown()
    off, on = (statistics.median(walls[way]) for way in ("off", "on"))
    return {"bytes": ALLREDUCE_BYTES, "ipus": 16, "runs": runs, "off_seconds": off,
            "on_seconds": on, "on_over_off": on / off, "spans_per_run": spans,
            "off_check_seconds": off_check_seconds()}


def off_check_seconds(calls: int = 1_000_000) -> float:
    """What one check of a recorder that is off costs (``begin()`` answering 0): the
    price an untraced run pays per place a span could start."""
    from ipu_node.wall_spans import WallSpans

    spans = WallSpans()
    started = time.perf_counter()
    for _ in range(calls):
        spans.begin()
    return (time.perf_counter() - started) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"16 MiB allreduce on pod16, median of {args.runs} runs each way")
    print(f"recorders off: {result['off_seconds'] * 1e3:8.1f} ms")
    print(f"recorders on:  {result['on_seconds'] * 1e3:8.1f} ms "
          f"({result['on_over_off']:.2f}x; {result['spans_per_run']:,} spans a run)")
    off_us = result["off_check_seconds"] * result["spans_per_run"] * 1e6
    print(f"off, the checks alone: {result['off_check_seconds'] * 1e9:.0f} ns each, about "
          f"{off_us:.0f} us a run at one check per span a recorded run keeps")


if __name__ == "__main__":
    main()
