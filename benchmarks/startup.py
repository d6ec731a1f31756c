"""Start-up: wall time of a whole ``ipupod`` process, against a named peer.

A phantom-mode ``ipupod bench allreduce`` of one size on ``ring1024`` does little work (its
cost model runs in well under a second), so what a user waits for is mostly the process
itself: the interpreter, the imports, the command-line machinery. This times whole
processes, from exec to exit, of

  (a) ``ipupod bench allreduce --topology examples/topologies/ring1024.yaml -b 64M -e 64M``
      (the console script beside this Python; or another ``--command``), and
  (b) the peer ``python -c "import numpy, yaml"`` with the same interpreter: the least any
      such tool pays, since the bench needs both modules anyway,

alternated in each repeat (a, b, a, b, ...) so that machine noise hits both alike. Goal: the
median of (a) at most 2.5 times that of (b). ``--importtime`` runs (a) once more under
``-X importtime`` and lists the slowest imports, to show where the start-up goes.

    python benchmarks/startup.py                 # a table
    python benchmarks/startup.py --json          # the same as JSON
    python benchmarks/startup.py --importtime    # and the 15 slowest imports
    python benchmarks/startup.py --command "topology show ring8"
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COMMAND = "bench allreduce --topology examples/topologies/ring1024.yaml -b 64M -e 64M"
PEER_CODE = "import numpy, yaml"
FALLBACK_CODE = "from cluster.cli.main import main; main()"  # the [project.scripts] entry point
GOAL_RATIO = 2.5
SLOWEST_IMPORTS = 15


class RunFailed(Exception):
    """A timed process could not start or exited non-zero."""


def ipupod_argv(args: list[str], python_options: list[str] | None = None) -> list[str]:
    """The argv running ``ipupod args``: the console script beside ``sys.executable`` (under
    ``python_options`` through the interpreter, if any), or its entry point via ``-c``."""
    script = Path(sys.executable).with_name("ipupod")
    if script.exists():
        if python_options:
            return [sys.executable, *python_options, str(script), *args]
        return [str(script), *args]
    return [sys.executable, *(python_options or []), "-c", FALLBACK_CODE, *args]


def run_once(argv: list[str], label: str) -> tuple[float, str]:
    """Wall seconds of one whole process run in the repository root, and its stderr."""
    started = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              check=False)
    except OSError as error:
        raise RunFailed(f"{label} could not start: {error}") from None
    seconds = time.perf_counter() - started
    stderr = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else "(nothing on stderr)"
        raise RunFailed(f"{label} exited with status {proc.returncode}: {last}")
    return seconds, stderr


def measure(commands: list[tuple[str, list[str]]], repeats: int, warmup: int) -> list[list[float]]:
    """Seconds of each command in each repeat, the commands alternated, after ``warmup``
    untimed rounds of the same."""
    for _ in range(warmup):
        for label, argv in commands:
            run_once(argv, label)
    seconds: list[list[float]] = [[] for _ in commands]
    for _ in range(repeats):
        for times, (label, argv) in zip(seconds, commands, strict=True):
            times.append(run_once(argv, label)[0])
    return seconds


def parse_importtime(stderr: str) -> list[dict[str, Any]]:
    """The ``import time: self | cumulative | name`` lines of ``-X importtime``, in order."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3:
            continue
        try:
            self_us, cumulative_us = int(parts[0]), int(parts[1])
        except ValueError:  # the header line
            continue
        name = parts[2].rstrip()
        rows.append({"module": name.strip(), "depth": (len(name) - len(name.lstrip()) - 1) // 2,
                     "self_us": self_us, "cumulative_us": cumulative_us})
    return rows


def importtime_report(args: list[str], label: str) -> dict[str, Any]:
    """Run ``ipupod args`` once under ``-X importtime``: its wall seconds, all its imports'
    time (the top-level imports' cumulative, summed) and the slowest imports."""
    seconds, stderr = run_once(ipupod_argv(args, ["-X", "importtime"]), label)
    rows = parse_importtime(stderr)
    total_us = sum(row["cumulative_us"] for row in rows if row["depth"] == 0)
    slowest = sorted(rows, key=lambda row: row["cumulative_us"], reverse=True)[:SLOWEST_IMPORTS]
    return {"wall_seconds": seconds, "imports": len(rows), "imports_us": total_us,
            "slowest": slowest}


def summarise(labels: list[str], argvs: list[list[str]],
              seconds: list[list[float]]) -> dict[str, Any]:
    """Best and median of each command, their ratios (a over b) and the verdict."""
    best = [min(times) for times in seconds]
    median = [statistics.median(times) for times in seconds]
    rows = [{"label": label, "argv": argv, "seconds": times, "best_seconds": b,
             "median_seconds": m}
            for label, argv, times, b, m in zip(labels, argvs, seconds, best, median, strict=True)]
    ratio_median = median[0] / median[1]
    return {"commands": rows, "ratio_median": ratio_median, "ratio_best": best[0] / best[1],
            "goal_ratio": GOAL_RATIO, "verdict": "PASS" if ratio_median <= GOAL_RATIO else "MISS"}


def print_table(report: dict[str, Any]) -> None:
    """The human-readable report."""
    print(f"# start-up: whole processes, wall seconds, best / median of {report['repeats']} "
          f"({report['warmup']} warm-up run{'' if report['warmup'] == 1 else 's'} each)")
    print(f"# python: {report['python']} ({report['python_version']})")
    print(f"# ipupod: {report['ipupod']}; working directory {report['cwd']}")
    width = max(len(row["label"]) for row in report["commands"]) + 3
    for row in report["commands"]:
        print(f"{row['label']:<{width}}{row['best_seconds']:.3f} / {row['median_seconds']:.3f}")
    met = "met" if report["verdict"] == "PASS" else "missed"
    print(f"# ratio (best):   {report['ratio_best']:.2f} times the peer")
    print(f"# ratio (median): {report['ratio_median']:.2f} times the peer; "
          f"goal at most {GOAL_RATIO:g}: {met} ({report['verdict']})")
    imports = report.get("importtime")
    if imports:
        print(f"# -X importtime, one more run of the first command: "
              f"{imports['wall_seconds']:.3f} s wall, {imports['imports']} imports taking "
              f"{imports['imports_us'] / 1e3:.0f} ms")
        print(f"# the {len(imports['slowest'])} slowest by cumulative time, ms:")
        print(f"{'cumulative':>10} {'self':>8}  module")
        for row in imports["slowest"]:
            print(f"{row['cumulative_us'] / 1e3:>10.1f} {row['self_us'] / 1e3:>8.1f}  "
                  f"{'  ' * row['depth']}{row['module']}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, metavar="N",
                        help="timed runs of each (default 10)")
    parser.add_argument("--warmup", type=int, default=2, metavar="N",
                        help="untimed runs of each first (default 2)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--command", default=DEFAULT_COMMAND,
                        help="the ipupod command line to time, quoted as one argument "
                             f"(default: \"{DEFAULT_COMMAND}\")")
    parser.add_argument("--importtime", action="store_true",
                        help=f"run the command once more under -X importtime and list the "
                             f"{SLOWEST_IMPORTS} slowest imports")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    try:
        args.ipupod_args = shlex.split(args.command)
    except ValueError as error:
        parser.error(f"--command: {error}")
    if args.ipupod_args[:1] == ["ipupod"]:
        args.ipupod_args = args.ipupod_args[1:]
    if not args.ipupod_args:
        parser.error("--command must name an ipupod command")
    return args


def main() -> None:
    args = parse_args()
    labels = [shlex.join(["ipupod", *args.ipupod_args]), f'python -c "{PEER_CODE}"']
    argvs = [ipupod_argv(args.ipupod_args), [sys.executable, "-c", PEER_CODE]]
    try:
        seconds = measure(list(zip(labels, argvs, strict=True)), args.repeats, args.warmup)
        report = {"python": sys.executable, "python_version": platform.python_version(),
                  "repeats": args.repeats, "warmup": args.warmup, "cwd": str(ROOT),
                  "ipupod": shlex.join(ipupod_argv([])),
                  "ipupod_args": args.ipupod_args, **summarise(labels, argvs, seconds)}
        if args.importtime:
            report["importtime"] = importtime_report(args.ipupod_args,
                                                     f"{labels[0]} (-X importtime)")
    except RunFailed as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)


if __name__ == "__main__":
    main()
