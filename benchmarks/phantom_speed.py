"""Phantom-mode speed: wall time and memory of the cost model at scale.

Targets (issue "Core"): a ring allreduce of one size on 1,024 IPUs in under 0.5 s of wall
time, interpreter start-up aside; a hierarchical allreduce sweep of 8 sizes on pod65536
in under 30 s and 4 GB of memory. Each case runs in a fresh Python process so that its
peak resident memory is its own; wall time is counted from after the imports.

    python benchmarks/phantom_speed.py            # every case, a table
    python benchmarks/phantom_speed.py --json     # the same as JSON
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict


class Case(TypedDict):
    """One measured case: an allreduce sweep and the wall time (s) and peak memory (bytes)
    it must stay under (no memory target: None)."""

    topology: str  # a preset name or a YAML file under the repository
    algorithm: str
    sizes: list[int]  # bytes per replica
    target_seconds: float
    target_bytes: int | None


ROOT = Path(__file__).resolve().parent.parent
CASES: dict[str, Case] = {
    "ring1024": {"topology": "examples/topologies/ring1024.yaml", "algorithm": "clockwise_ring",
                 "sizes": [64 << 20], "target_seconds": 0.5, "target_bytes": None},
    "pod65536": {"topology": "pod65536", "algorithm": "hierarchical",
                 "sizes": [(1 << 20) << k for k in range(8)], "target_seconds": 30.0,
                 "target_bytes": 4 << 30},
}


def run_case(name: str) -> dict[str, Any]:
    """Measure one case in this process (called in a child)."""
    sys.path.insert(0, str(ROOT))
    from cluster.model.spec import load_topology
    from gcl.bench_rows import run_phantom
    from gcl.bench_spec import BenchSpec, SizeRange
    from gcl.collectives import ALLREDUCE

    case = CASES[name]
    started = time.perf_counter()
    topology = load_topology(str(ROOT / case["topology"]) if case["topology"].endswith(".yaml")
                             else case["topology"])
    built = time.perf_counter()
    spec = BenchSpec(ALLREDUCE, SizeRange(min(case["sizes"]), max(case["sizes"])),
                     algorithm=case["algorithm"])  # the sizes: powers of two apart
    rows = list(run_phantom(spec.place(topology)))
    finished = time.perf_counter()
    return {
        "case": name, "ipus": topology.ipu_count, "algorithm": case["algorithm"],
        "sizes": len(rows), "build_seconds": built - started,
        "wall_seconds": finished - started,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "target_seconds": case["target_seconds"], "target_bytes": case["target_bytes"],
        "sim_seconds": [r.sim_seconds for r in rows],
    }


def main() -> None:
    """Command line: run every case in a child process and print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child)))
        return
    results = []
    for name in CASES:
        out = subprocess.run([sys.executable, __file__, "--child", name], capture_output=True,
                             text=True, check=True, cwd=ROOT)
        results.append(json.loads(out.stdout))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'case':<10} {'IPUs':>6} {'algorithm':<16} {'sizes':>5} {'wall(s)':>8} "
          f"{'target(s)':>9} {'peak RSS':>9} {'target':>7} {'verdict':>7}")
    for r in results:
        ok = r["wall_seconds"] < r["target_seconds"] and (
            r["target_bytes"] is None or r["peak_rss_bytes"] < r["target_bytes"])
        target_mem = "-" if r["target_bytes"] is None else f"{r['target_bytes'] / 2**30:.0f} GiB"
        print(f"{r['case']:<10} {r['ipus']:>6} {r['algorithm']:<16} {r['sizes']:>5} "
              f"{r['wall_seconds']:>8.3f} {r['target_seconds']:>9.1f} "
              f"{r['peak_rss_bytes'] / 2**20:>6.0f} MiB {target_mem:>7} "
              f"{'ok' if ok else 'SLOW':>7}")
    print("# wall: seconds on this machine after the imports; targets from the issue \"Core\"")


if __name__ == "__main__":
    main()
