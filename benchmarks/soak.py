"""Soak: many real-mode collectives of random sizes, ops, dtypes and groups on concurrent
partitions, every result checked; optionally with cards killed along the way.

Each partition (placed by the V-IPU rules) gets its own thread, which runs its share of
the collectives one after another; the partitions run at once on the same devices' Ray
actors and links. Every result is checked element by element: integers against NumPy,
floats bitwise against the reference that reduces in the schedule's order
(:func:`gcl.local_executor.run_in_memory`). With ``--kills N`` a killer thread kills N random
cards during the run; a collective that fails because of it must name the killed card,
is counted, and is run again once the card is back.

    python benchmarks/soak.py                        # 1000 collectives, 4 partitions of dss8440
    python benchmarks/soak.py --kills 10 --json      # with 10 cards killed on the way
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

if TYPE_CHECKING:
    from ipu_node.executor import CollectiveResult
    from ipu_node.pod import EmulatedPod

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLLECTIVES = ("allreduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all")
REDUCING = ("allreduce", "reduce-scatter")
DTYPES = ("float32", "float16", "int32")
OPS = ("sum", "mean", "max", "min")


class Request(TypedDict):
    """One random collective, as :meth:`ipu_node.pod.EmulatedPod.collective` takes it."""

    collective: str
    dtype: str
    group: str  # all, consecutive:K or orthogonal:K
    algorithm: str
    op: str
    elements: int  # per replica
    root: int


@dataclass
class Tally:
    """What one partition's thread did."""

    partition: str
    ipus: tuple[int, ...]
    runs: int = 0
    wrong_elements: int = 0
    wrong_runs: int = 0
    bytes: int = 0
    sim_seconds: float = 0.0
    wall: list[float] = field(default_factory=list)
    killed_runs: int = 0  # failed while cards were being killed, then run again
    misnamed: list[str] = field(default_factory=list)  # failures that did not name the card
    refused: int = 0  # algorithm not applicable to the group: run with auto instead
    errors: list[str] = field(default_factory=list)  # anything else that went wrong
    by_collective: dict[str, int] = field(default_factory=dict)


def random_request(rng: np.random.Generator, size: int, max_bytes: int) -> Request:
    """One collective: kind, dtype, op, group, algorithm and per-replica inputs' length."""
    from gcl.algorithms import for_collective
    from gcl.collectives import collective

    kind = str(rng.choice(COLLECTIVES))
    dtype = str(rng.choice(DTYPES))
    group_size = int(rng.choice([g for g in (size, size // 2) if g >= 2] or [size]))
    group = "all" if group_size == size else str(rng.choice([f"consecutive:{group_size}",
                                                             f"orthogonal:{group_size}"]))
    names = [a.name for a in for_collective(collective(kind))]
    algorithm = str(rng.choice(["auto", *names]))
    itemsize = np.dtype(dtype).itemsize
    nbytes = math.exp(rng.uniform(math.log(256), math.log(max_bytes)))
    elements = max(1, int(nbytes // itemsize))
    if kind in ("reduce-scatter", "all-to-all"):
        elements = max(group_size, elements - elements % group_size)
    return {"collective": kind, "dtype": dtype, "group": group, "algorithm": algorithm,
            "op": str(rng.choice(OPS)) if kind in REDUCING else "sum", "elements": elements,
            "root": int(rng.integers(group_size)) if kind == "broadcast" else 0}


def random_inputs(rng: np.random.Generator, request: Request,
                  replicas: int) -> list[np.ndarray]:
    """One random input array per replica, of the request's dtype and length."""
    n, dtype = request["elements"], request["dtype"]
    if dtype == "int32":
        return [rng.integers(-1000, 1000, n, dtype=np.int32) for _ in range(replicas)]
    return [rng.standard_normal(n).astype(dtype) for _ in range(replicas)]


def wrong_elements(result: CollectiveResult, inputs: list[np.ndarray], request: Request,
                   ipus: list[int]) -> int:
    """Elements that differ from the reference (bitwise for floats, exact for integers)."""
    from gcl.bench_rows import count_wrong
    from gcl.collectives import ReduceOp
    from gcl.local_executor import run_in_memory

    replica_of = {ipu: r for r, ipu in enumerate(ipus)}
    order = [replica_of[i] for members in result.schedule.groups for i in members.tolist()]
    ordered_inputs = [inputs[r] for r in order]
    got = [result.results[r] for r in order]
    reference = run_in_memory(result.schedule, ordered_inputs, ReduceOp(request["op"]))
    wrong = sum(int(np.count_nonzero(g.view(np.uint8) != w.view(np.uint8)))
                for g, w in zip(got, reference))
    if request["dtype"] == "int32":  # and the plain NumPy answer, for integers exact
        wrong += count_wrong(result.schedule, got, ordered_inputs, ReduceOp(request["op"]),
                             request["root"])
    return wrong


def soak_partition(pod: EmulatedPod, tally: Tally, count: int, seed: int, max_bytes: int,
                   killed: dict[str, int]) -> None:
    """One partition's thread: run ``count`` random collectives; any failure that ends it is
    recorded in ``tally.errors``. ``killed`` counts the cards killed so far, by name."""
    try:
        _soak(pod, tally, count, seed, max_bytes, killed)
    except Exception as error:  # noqa: BLE001 - reported: the soak counts every failure
        tally.errors.append(f"{type(error).__name__}: {error}")


def _soak(pod: EmulatedPod, tally: Tally, count: int, seed: int, max_bytes: int,
          killed: dict[str, int]) -> None:
    from cluster.errors import ScheduleError
    from gcl.collectives import CollectiveName
    from ipu_node.device_errors import DeviceError

    rng = np.random.default_rng(seed)
    ipus = list(tally.ipus)
    for _ in range(count):
        request = random_request(rng, len(ipus), max_bytes)
        inputs = random_inputs(rng, request, len(ipus))
        while True:
            started = time.perf_counter()
            try:
                result = pod.collective(
                    CollectiveName(request["collective"]), inputs, algorithm=request["algorithm"],
                    group=request["group"], op=request["op"], root=request["root"], ipus=ipus)
            except ScheduleError:
                if request["algorithm"] == "auto":
                    raise
                tally.refused += 1
                request["algorithm"] = "auto"
                continue
            except DeviceError as error:  # must be a killed card's doing, and name it
                if not killed:
                    raise
                tally.killed_runs += 1
                if not any(name in str(error) for name in killed):
                    tally.misnamed.append(str(error))
                _wait_until_healthy(pod)
                continue
            break
        tally.wall.append(time.perf_counter() - started)
        wrong = wrong_elements(result, inputs, request, ipus)
        tally.runs += 1
        tally.wrong_elements += wrong
        tally.wrong_runs += wrong > 0
        tally.bytes += inputs[0].nbytes * len(ipus)
        tally.sim_seconds += result.sim_seconds
        tally.by_collective[request["collective"]] = tally.by_collective.get(
            request["collective"], 0) + 1


def _wait_until_healthy(pod: EmulatedPod, within_seconds: float = 120.0) -> None:
    limit = time.monotonic() + within_seconds
    while time.monotonic() < limit:
        if all(d.state == "healthy" for d in pod.health()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the POD did not recover within {within_seconds:g} s: {pod.health()}")


def killer(pod: EmulatedPod, kills: int, every_seconds: float, seed: int, killed: dict[str, int],
           stop: threading.Event) -> None:
    """Kill ``kills`` random cards, one every ``every_seconds`` seconds, each after the last is
    back."""
    rng = np.random.default_rng(seed)
    cards = [spec.name for spec in pod.specs if spec.ipus]
    for _ in range(kills):
        if stop.wait(every_seconds):
            return
        _wait_until_healthy(pod)
        name = str(rng.choice(cards))
        killed[name] = killed.get(name, 0) + 1
        pod.kill_card(name)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topology", default="dss8440")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--collectives", type=int, default=1000, help="in all, over partitions")
    parser.add_argument("--max-bytes", type=int, default=1 << 20, help="per replica")
    parser.add_argument("--kills", type=int, default=0, help="cards to kill during the soak")
    parser.add_argument("--kill-every", type=float, default=5.0, help="seconds between kills")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line: soak, print the report; exit status 1 if anything was wrong."""
    args = parse(argv)
    report = soak(args)
    print(json.dumps(report, indent=2) if args.json else render(report))
    failed = report["wrong_elements"] or report["misnamed_failures"] or report["errors"]
    return 1 if failed else 0


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the soak as ``args`` say; return its report (:func:`summarize`)."""
    from cluster.service.partitions import PartitionTable
    from ipu_node.pod import EmulatedPod

    started = time.perf_counter()
    pod = EmulatedPod.launch(args.topology)
    try:
        table = PartitionTable(pod.topology)
        size = pod.topology.ipu_count // args.partitions
        tallies = [Tally(p.name, p.ipus) for p in
                   (table.create(f"soak{k}", size) for k in range(args.partitions))]
        shares = [args.collectives // args.partitions + (k < args.collectives % args.partitions)
                  for k in range(args.partitions)]
        killed: dict[str, int] = {}
        stop = threading.Event()
        threads = [threading.Thread(target=soak_partition, args=(
            pod, tally, share, args.seed * 1000 + k, args.max_bytes, killed))
            for k, (tally, share) in enumerate(zip(tallies, shares))]
        assassin = threading.Thread(target=killer, args=(pod, args.kills, args.kill_every,
                                                         args.seed, killed, stop))
        soak_started = time.perf_counter()
        for thread in [*threads, assassin]:
            thread.start()
        for thread in threads:
            thread.join()
        stop.set()
        assassin.join()
        soak_seconds = time.perf_counter() - soak_started
        restarts = sum(pod.restarts)
    finally:
        pod.shutdown(stop_ray=True)
    return summarize(args, tallies, soak_seconds, time.perf_counter() - started, killed,
                     restarts)


def summarize(args: argparse.Namespace, tallies: list[Tally], soak_seconds: float,
              total_seconds: float, killed: dict[str, int], restarts: int) -> dict[str, Any]:
    """The soak's report: per partition, totals, wall times (s), faults and errors."""
    walls = sorted(w for t in tallies for w in t.wall)
    kinds: dict[str, int] = {}
    for tally in tallies:
        for kind, n in tally.by_collective.items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {
        "topology": args.topology, "partitions": [
            {"name": t.partition, "ipus": list(t.ipus), "collectives": t.runs,
             "wrong_elements": t.wrong_elements, "killed_runs": t.killed_runs} for t in tallies],
        "collectives": sum(t.runs for t in tallies), "by_collective": kinds,
        "wrong_elements": sum(t.wrong_elements for t in tallies),
        "wrong_collectives": sum(t.wrong_runs for t in tallies),
        "bytes_checked": sum(t.bytes for t in tallies),
        "soak_wall_seconds": soak_seconds, "total_wall_seconds": total_seconds,
        "collectives_per_second": sum(t.runs for t in tallies) / soak_seconds,
        "wall_p50_seconds": statistics.median(walls) if walls else 0.0,
        "wall_p99_seconds": walls[int(0.99 * (len(walls) - 1))] if walls else 0.0,
        "sim_seconds": sum(t.sim_seconds for t in tallies),
        "cards_kills_requested": args.kills,
        "cards_killed": sum(killed.values()), "actor_restarts": restarts,
        "runs_failed_by_kills": sum(t.killed_runs for t in tallies),
        "misnamed_failures": [m for t in tallies for m in t.misnamed],
        "algorithm_refused_then_auto": sum(t.refused for t in tallies),
        "errors": [e for t in tallies for e in t.errors],
    }


def render(report: dict[str, Any]) -> str:
    """The report as readable lines (no trailing newline)."""
    lines = [f"# soak on {report['topology']}: {report['collectives']} collectives on "
             f"{len(report['partitions'])} concurrent partitions (real mode; wall = this machine)",
             f"{'partition':<10} {'ipus':<16} {'collectives':>11} {'#wrong':>7} {'killed':>7}"]
    for p in report["partitions"]:
        lines.append(f"{p['name']:<10} {','.join(map(str, p['ipus'])):<16} "
                     f"{p['collectives']:>11} {p['wrong_elements']:>7} {p['killed_runs']:>7}")
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(report["by_collective"].items()))
    lines += [
        f"by collective: {kinds}",
        f"wrong: {report['wrong_elements']} elements in {report['wrong_collectives']} "
        f"collectives; {report['bytes_checked'] / 2**20:.1f} MiB of inputs checked",
        f"wall: soak {report['soak_wall_seconds']:.1f} s ({report['collectives_per_second']:.1f} "
        f"collectives/s; per collective p50 {report['wall_p50_seconds'] * 1e3:.0f} ms, p99 "
        f"{report['wall_p99_seconds'] * 1e3:.0f} ms); with launch "
        f"{report['total_wall_seconds']:.1f} s",
        f"simulated: {report['sim_seconds'] * 1e3:.3f} ms of collectives in all",
        _kills_line(report),
        f"faults: {report['cards_killed']} cards killed, {report['actor_restarts']} restarts, "
        f"{report['runs_failed_by_kills']} collectives failed by them and were run again; "
        f"{len(report['misnamed_failures'])} failures did not name the killed card",
        f"algorithm not applicable to the group (run with auto): "
        f"{report['algorithm_refused_then_auto']}",
    ] + [f"ERROR: {e}" for e in report["errors"]]
    return "\n".join(lines)


def _kills_line(report: dict[str, Any]) -> str:
    """How many of the requested kills happened, and why not all, if not."""
    asked, done = report["cards_kills_requested"], report["cards_killed"]
    if done >= asked:
        return f"kills: {done} of {asked} requested"
    return (f"kills: only {done} of {asked} requested: the collectives ended first "
            "(raise --collectives or lower --kill-every)")


if __name__ == "__main__":
    sys.exit(main())
