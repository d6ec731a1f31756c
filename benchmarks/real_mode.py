"""Real mode: what the emulation costs in wall time and memory, against a named peer.

1. Launch of ``pod64`` (16 IPU-M2000s) from nothing (Ray not yet started) to ready: wall
   seconds (and of them, starting Ray), and the device processes' memory summed: resident
   (RSS), proportional (PSS: pages shared between processes, such as Ray's and NumPy's
   libraries, split among them) and unique (USS), and the machine's used memory before and
   after. Target (issue 41): at most 1.3 times its bare-actor floor (4.).
2. ``pod256`` (``--big-pod``) launched from nothing plus one 1 MiB allreduce: under 15 s
   with 4 devices a process.
   Both launches run once per ``--devices-per-process`` value (default ``1,4``: a process
   per device, as ``ipupod`` does by default, and 4 devices per process).
3. A 64 MiB float32 allreduce over the 16 IPUs of one DSS 8440 in real mode (inputs
   already on the IPUs, results left there; in place, as gloo's, unless ``--out-of-place``),
   against torch.distributed's gloo backend allreducing the same bytes over 16 processes on
   this machine, in the same run (the peer runs after Ray is stopped, so neither competes
   with the other). Targets (issue 41): at most 0.4 times gloo's time and 2 times the
   memory floor (4.), each round's median of the repeats. And what starting a collective
   costs: the median wall time of a 64 B in-place allreduce.
4. The floors of ``benchmarks/floors.py``, in the same run: each launch against Ray and as
   many bare actors started from nothing right after it, the allreduce against one process
   doing the same reads, sums and writes with NumPy; each printed as a ratio.

Everything runs in ``--rounds`` alternated rounds (5 by default, as issue 41's targets
ask): each round measures ours, its floors and gloo one after the other, so a change in
the machine's load hits all of them; each figure and each ratio (taken within its round)
is reported as the median of the rounds, with their range.

    python benchmarks/real_mode.py            # a table
    python benchmarks/real_mode.py --json     # the same as JSON
    python benchmarks/real_mode.py --rounds 1 --repeats 3 --skip-launch   # a quick look
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.floors import (  # noqa: E402 - needs ROOT on the path
    bare_actor_floor_seconds,
    memory_floor_seconds,
)
from benchmarks.procfs import cpu_seconds, rollup_bytes  # noqa: E402 - needs ROOT on the path
from benchmarks.rounds import spread  # noqa: E402 - needs ROOT on the path
from cluster.cli.output import ray_chatter_to_stderr  # noqa: E402 - needs ROOT on the path

ALLREDUCE_BYTES = 64 << 20


def _used_bytes() -> int:
    """Memory in use on this machine, in bytes: total less available."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())

    def kib(key: str) -> int:
        return int(info[key].split()[0]) * 1024

    return kib("MemTotal") - kib("MemAvailable")


def launch_pod64(devices_per_process: int = 1) -> dict[str, Any]:
    """Launch pod64 from nothing: its devices, wall seconds to ready (and of that, starting
    Ray), its processes' resident bytes and the machine's used bytes added; then shut it
    and Ray down."""
    import ray

    from ipu_node.pod import EmulatedPod
    from ipu_node.ray_session import ensure_ray

    used_before = _used_bytes()
    started = time.perf_counter()
    ensure_ray(None, 64)
    ray_started = time.perf_counter()
    pod = EmulatedPod.launch("pod64", devices_per_process=devices_per_process)
    ready = time.perf_counter()
    pids = sorted({int(info["pid"]) for info in pod.infos})
    memory = [rollup_bytes(pid) for pid in pids]
    used_after = _used_bytes()
    pod.shutdown()
    ray.shutdown()
    return {"devices": len(pod.specs), "processes": len(pids),
            "devices_per_process": devices_per_process, "launch_seconds": ready - started,
            "ray_start_seconds": ray_started - started,
            **{f"actors_{kind}_bytes": sum(m[kind] for m in memory)
               for kind in ("rss", "pss", "uss")},
            "machine_used_delta_bytes": used_after - used_before}


def launch_and_allreduce(topology: str, devices_per_process: int = 1) -> dict[str, Any]:
    """Launch ``topology`` from nothing and run one 1 MiB float32 allreduce on all its
    IPUs (``auto``): wall seconds of each, and of both; then shut it and Ray down."""
    import ray

    from gcl.collectives import CollectiveName
    from ipu_node.pod import EmulatedPod

    started = time.perf_counter()
    pod = EmulatedPod.launch(topology, devices_per_process=devices_per_process)
    launched = time.perf_counter()
    count = (1 << 20) // 4
    result = pod.collective(CollectiveName.ALLREDUCE,
                            [np.ones(count, dtype=np.float32)] * pod.topology.ipu_count)
    done = time.perf_counter()
    correct = bool(np.all(result.results[0] == pod.topology.ipu_count))
    processes = len({info["pid"] for info in pod.infos})
    pod.shutdown()
    ray.shutdown()
    return {"topology": topology, "devices": len(pod.specs), "processes": processes,
            "devices_per_process": devices_per_process, "launch_seconds": launched - started,
            "allreduce_seconds": done - launched, "total_seconds": done - started,
            "algorithm": result.algorithm, "correct": correct}


PLACEMENTS = {
    "ipu-order": None,  # replica r on IPU r
    # replica r and r + 8 on the same C2 card: halving_doubling's largest exchanges (between
    # replicas r and r XOR 1) then cross card actors, twice the bytes (1,792 vs 896 MiB)
    "card-pairs": [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15],
}


START_REPEATS = 20  # tiny allreduces timed for what starting a collective costs


def start_seconds(pod: Any) -> float:
    """What starting a collective costs: the median wall seconds of an in-place allreduce of
    16 float32 per IPU (its data moves in microseconds; the rest is the round trips)."""
    from gcl.collectives import CollectiveName

    pod.put("tiny", [np.full(16, r + 1, dtype=np.float32) for r in range(16)])
    pod.collective(CollectiveName.ALLREDUCE, "tiny", output="tiny")  # warm-up
    seconds = [pod.collective(CollectiveName.ALLREDUCE, "tiny", output="tiny").wall_seconds
               for _ in range(START_REPEATS)]
    return statistics.median(seconds)


def emulator_allreduce(repeats: int, algorithms: list[str], placement: str = "ipu-order",
                       in_place: bool = True) -> dict[str, dict[str, Any]]:
    """Wall seconds of each algorithm's allreduce of ``grad``: in place (``output`` is
    ``grad``, as gloo's ``all_reduce`` works) or into a second tensor; and, under
    ``"start"``, :func:`start_seconds`."""
    import ray

    from gcl.collectives import CollectiveName
    from ipu_node.pod import EmulatedPod

    pod = EmulatedPod.launch("dss8440")
    count = ALLREDUCE_BYTES // 4
    out: dict[str, dict[str, Any]] = {}
    options = {"ipus": PLACEMENTS[placement]} if PLACEMENTS[placement] else {}
    output = "grad" if in_place else "sum"
    for algorithm in algorithms:
        pod.put("grad", [np.full(count, r + 1, dtype=np.float32) for r in range(16)])

        run = functools.partial(pod.collective, CollectiveName.ALLREDUCE, "grad", output=output,
                                algorithm=algorithm, **options)

        result = run()  # warm-up
        pids = {int(info["pid"]) for info in pod.infos}
        cpu_before = sum(cpu_seconds(pid) for pid in pids)
        seconds = [run().wall_seconds for _ in range(repeats)]
        actors_cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
        # in place every run sums sums: 136 * 16**k, exact in float32
        expected = 136.0 * 16.0 ** (repeats if in_place else 0)
        correct = bool(np.all(pod.get(output, [5])[0] == expected))
        out[algorithm] = {"seconds": seconds, "best_seconds": min(seconds),
                          "median_seconds": statistics.median(seconds), "correct": correct,
                          "sim_seconds": result.sim_seconds,
                          "actors_cpu_seconds_per_allreduce": actors_cpu / repeats}
    start = start_seconds(pod)
    pod.shutdown()
    ray.shutdown()
    return {"algorithms": out, "start": {"seconds": start}}


def one_round(args: argparse.Namespace, per_process: list[int]) -> dict[str, Any]:
    """One round: the launches (each followed by its bare-actor floor), the big POD, the
    allreduces, the memory floor and gloo, one after the other; each ratio within it."""
    launches = [] if args.skip_launch else [launch_pod64(n) for n in per_process]
    for launch in launches:  # the floor: as many bare actors, right after each launch
        launch["bare_actors"] = bare_actor_floor_seconds(launch["processes"])
        launch["floor_ratio"] = launch["launch_seconds"] / launch["bare_actors"]["launch_seconds"]
    bigs = [] if args.skip_launch else [launch_and_allreduce(args.big_pod, n)
                                        for n in per_process]
    measured = emulator_allreduce(args.repeats, args.algorithms.split(","), args.placement,
                                  not args.out_of_place)
    emulator = measured["algorithms"]
    memory = memory_floor_seconds(ALLREDUCE_BYTES, 16, args.repeats)
    from benchmarks.gloo_peer import gloo_allreduce_seconds, torch_available

    gloo = (gloo_allreduce_seconds(16, ALLREDUCE_BYTES, args.repeats)
            if torch_available() else {"skipped": "torch is not installed"})
    for row in emulator.values():
        row["memory_ratio"] = row["median_seconds"] / memory["median_seconds"]
        if "skipped" not in gloo:
            row["gloo_ratio"] = row["median_seconds"] / gloo["median_seconds"]
    return {"pod64_launch": launches, "big_pod": bigs, "emulator": emulator,
            "start_seconds": measured["start"]["seconds"], "memory_floor": memory, "gloo": gloo}


def main() -> None:
    """Command line: the rounds, then a table of their medians, or JSON of every round."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternated rounds of ours, the floors and gloo (medians reported)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="allreduces timed in each round (its median is the round's figure)")
    parser.add_argument("--algorithms",
                        default="clockwise_ring,halving_doubling,bidirectional_ring_pair")
    parser.add_argument("--placement", choices=sorted(PLACEMENTS), default="ipu-order",
                        help="which IPU each replica is on (card-pairs: replicas r and r+8 "
                             "share a card)")
    parser.add_argument("--skip-launch", action="store_true",
                        help="skip the launches (pod64, and --big-pod with an allreduce)")
    parser.add_argument("--big-pod", default="pod256",
                        help="the POD launched and allreduced once (1 MiB) after pod64")
    parser.add_argument("--devices-per-process", default="1,4",
                        help="the launches once per value, comma-separated (1: a process "
                             "per card or IPU-M2000, the default of ipupod)")
    parser.add_argument("--out-of-place", action="store_true",
                        help="allreduce into a second tensor (default: in place, like gloo)")
    args = parser.parse_args()
    if args.repeats < 1 or args.rounds < 1:
        parser.error("--repeats and --rounds must be at least 1")
    per_process = [int(n) for n in args.devices_per_process.split(",")]
    with ray_chatter_to_stderr() as stdout:  # Ray's warnings print to standard output
        rounds = [one_round(args, per_process) for _ in range(args.rounds)]
    if args.json:
        print(json.dumps({"rounds": rounds}, indent=2), file=stdout)
        return
    print_table(rounds, args)


def _show(values: list[float], unit: str = " s", digits: int = 2) -> str:
    """A figure as the median of the rounds, with their range when there are several."""
    median, low, high = spread(values)
    if len(values) == 1:
        return f"{median:.{digits}f}{unit}"
    return f"{median:.{digits}f}{unit} ({low:.{digits}f}-{high:.{digits}f})"


def print_table(rounds: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """Each figure as the median of the rounds (and their range)."""
    print(f"median of {len(rounds)} alternated round(s) (range in brackets)")
    first = rounds[0]
    for i, launch in enumerate(first["pod64_launch"]):
        each = [r["pod64_launch"][i] for r in rounds]
        print(f"pod64 launch ({launch['devices']} devices in {launch['processes']} processes): "
              f"{_show([e['launch_seconds'] for e in each], digits=1)} wall, of which Ray "
              f"{_show([e['ray_start_seconds'] for e in each], digits=1)}; actors USS "
              f"{_show([e['actors_uss_bytes'] / 2**30 for e in each], ' GiB')}")
        print(f"  floor: Ray and {launch['bare_actors']['actors']} bare actors from nothing "
              f"{_show([e['bare_actors']['launch_seconds'] for e in each], digits=1)}: "
              f"launch / floor {_show([e['floor_ratio'] for e in each], 'x')} (target 1.3x)")
    for i, big in enumerate(first["big_pod"]):
        each = [r["big_pod"][i] for r in rounds]
        print(f"{big['topology']} launch ({big['devices']} devices in {big['processes']} "
              f"processes) + one 1 MiB allreduce: "
              f"{_show([e['total_seconds'] for e in each], digits=1)} "
              f"(target 15 s with 4 a process)  correct={all(e['correct'] for e in each)}")
    print(f"64 MiB float32 allreduce ({'into a second tensor' if args.out_of_place else 'in place'}"
          f"), 16 IPUs / 16 processes, wall seconds, each round's median of {args.repeats}:")
    for name in first["emulator"]:
        rows = [r["emulator"][name] for r in rounds]
        print(f"  emulator {name:<24} {_show([e['median_seconds'] for e in rows], digits=3)}"
              f"  correct={all(e['correct'] for e in rows)}  card actors' CPU "
              f"{_show([e['actors_cpu_seconds_per_allreduce'] for e in rows], digits=3)} a run")
    print(f"  starting a collective (an in-place allreduce of 64 B a replica, median of "
          f"{START_REPEATS}): {_show([r['start_seconds'] * 1e3 for r in rounds], ' ms', 1)}")
    print(f"  memory floor (one process){'':<8} "
          f"{_show([r['memory_floor']['median_seconds'] for r in rounds], digits=3)}")
    if "skipped" in first["gloo"]:
        print(f"  gloo: skipped ({first['gloo']['skipped']})")
    else:
        print(f"  gloo (torch {first['gloo']['torch_version']}){'':<15} "
              f"{_show([r['gloo']['median_seconds'] for r in rounds], digits=3)}  "
              f"correct={all(r['gloo']['correct'] for r in rounds)}")
    for name in first["emulator"]:
        rows = [r["emulator"][name] for r in rounds]
        line = f"  {name}: / memory floor {_show([e['memory_ratio'] for e in rows], 'x')} (2x)"
        if "gloo_ratio" in rows[0]:
            line += f", / gloo {_show([e['gloo_ratio'] for e in rows], 'x')} (0.4x)"
        print(line)


if __name__ == "__main__":
    main()
