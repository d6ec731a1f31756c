"""Gloo peer: wall time of a real torch.distributed gloo allreduce on this machine.

The real-mode benchmark compares the emulator against a measured peer: gloo allreducing
a float32 tensor (64 MiB by default) over N local processes (16 by default) talking TCP
over loopback. Each timed repeat is the slowest rank's wall time around dist.all_reduce,
taken right after a barrier so that every rank starts together. torch is an optional
extra (`pip install -e '.[bench]'`: torch 2.13 to 2.15, a CPU build is enough); without
it the peer says so and exits 2.

    python benchmarks/gloo_peer.py                      # 16 ranks, 64 MiB, a table
    python benchmarks/gloo_peer.py --json               # the same as JSON
    python benchmarks/gloo_peer.py --world-size 4 --bytes 1048576 --repeats 5
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import statistics
import sys
import time
import traceback
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue

# What a rank reports: ("ok", rank, per-repeat wall seconds, sum correct) or
# ("error", rank, the traceback's text, False).
Report = tuple[str, int, list[float] | str, bool]

TORCH_MISSING = ("torch is not installed: pip install -e '.[bench]' (torch 2.13 to 2.15, a CPU "
                 "build) to run the gloo peer")
INIT_TIMEOUT = datetime.timedelta(seconds=120)  # rendezvous and per-collective limit in gloo
RUN_TIMEOUT_SECONDS = 900.0  # whole run: spawn, rendezvous, warmup and repeats, all ranks
_POLL_SECONDS = 1.0


def torch_available() -> bool:
    """True if torch with the gloo backend can be imported, so the peer can run."""
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_gloo_available()


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (bind to port 0), for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, numel: int, repeats: int, warmup: int,
            results: Queue[Report]) -> None:
    """One gloo rank: time each allreduce after a barrier and check its sum; report on
    `results`.

    The environment is set before torch is imported so that gloo binds to loopback and
    each rank keeps to one thread (16 ranks share 2 cores)."""
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                       "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"})
    torch_dist: ModuleType | None = None  # torch.distributed, once imported
    try:
        import torch
        import torch.distributed as dist

        torch_dist = dist
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size,
                                timeout=INIT_TIMEOUT)
        tensor = torch.empty(numel, dtype=torch.float32)
        expected = float(world_size * (world_size + 1) // 2)
        seconds: list[float] = []
        correct = True
        for i in range(warmup + repeats):
            tensor.fill_(rank + 1)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            elapsed = time.perf_counter() - start
            correct = correct and bool(torch.all(tensor == expected))
            if i >= warmup:
                seconds.append(elapsed)
        results.put(("ok", rank, seconds, correct))
    except BaseException:  # noqa: BLE001 - report every failure: the parent need not time out
        results.put(("error", rank, traceback.format_exc(), False))
    finally:
        if torch_dist is not None and torch_dist.is_initialized():
            torch_dist.destroy_process_group()


def _stop(procs: list[BaseProcess]) -> None:
    """Kill every rank still alive and reap it, so a failed run leaves no processes behind."""
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(5)


def gloo_allreduce_seconds(world_size: int = 16, nbytes: int = 64 << 20, repeats: int = 3,
                           warmup: int = 1) -> dict[str, Any]:
    """Run `repeats` timed allreduces (after `warmup` untimed ones) of nbytes float32 over
    world_size gloo processes on 127.0.0.1; return {"world_size", "bytes", "seconds":
    [per-repeat wall seconds measured as the max over ranks of the time around
    dist.all_reduce with a barrier before], "best_seconds", "median_seconds",
    "torch_version", "correct": bool (every rank's result equalled the sum of the ranks'
    inputs: rank r fills with r+1, so world_size*(world_size+1)/2)}.

    Raises RuntimeError if torch is missing, or if a rank fails or the run outlasts
    RUN_TIMEOUT_SECONDS (every rank is then killed)."""
    if not torch_available():
        raise RuntimeError(TORCH_MISSING)
    if world_size < 1 or repeats < 1 or warmup < 0:
        raise ValueError("world_size and repeats must be >= 1 and warmup >= 0")
    if nbytes < 4 or nbytes % 4:
        raise ValueError(f"bytes must be a positive multiple of 4 (float32), got {nbytes}")
    import torch

    ctx = mp.get_context("spawn")
    results: Queue[Report] = ctx.Queue()
    port = _free_port()
    procs: list[BaseProcess] = [
        ctx.Process(target=_worker, name=f"gloo-rank-{r}", daemon=True,
                    args=(r, world_size, port, nbytes // 4, repeats, warmup, results))
        for r in range(world_size)]
    deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
    try:
        for p in procs:
            p.start()
        reports = _gather_reports(procs, results, deadline)
        for p in procs:
            p.join(max(1.0, deadline - time.monotonic()))
            if p.is_alive():
                raise RuntimeError(f"gloo peer {p.name} did not exit after reporting")
    except BaseException:
        _stop(procs)
        raise
    finally:
        results.close()
    seconds = [max(reports[r][0][i] for r in range(world_size)) for i in range(repeats)]
    return {
        "world_size": world_size, "bytes": nbytes, "seconds": seconds,
        "best_seconds": min(seconds), "median_seconds": statistics.median(seconds),
        "torch_version": torch.__version__,
        "correct": all(reports[r][1] for r in range(world_size)),
    }


def _gather_reports(procs: list[BaseProcess], results: Queue[Report],
                    deadline: float) -> dict[int, tuple[list[float], bool]]:
    """Every rank's report (its per-repeat seconds and whether its sum was right), by rank;
    a RuntimeError if a rank fails, exits without reporting, or ``deadline`` passes."""
    world_size = len(procs)
    reports: dict[int, tuple[list[float], bool]] = {}
    while len(reports) < world_size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"gloo peer timed out after {RUN_TIMEOUT_SECONDS:.0f} s: "
                               f"{len(reports)} of {world_size} ranks reported")
        try:
            status, rank, payload, correct = results.get(timeout=_POLL_SECONDS)
        except queue_mod.Empty:
            dead = [(r, p.exitcode) for r, p in enumerate(procs)
                    if r not in reports and p.exitcode is not None]
            if dead:  # exited without a report: crashed (e.g. killed for memory)
                raise RuntimeError(f"gloo peer rank {dead[0][0]} exited with code "
                                   f"{dead[0][1]} before reporting") from None
            continue
        if status == "error" or isinstance(payload, str):  # the payload is a traceback
            raise RuntimeError(f"gloo peer rank {rank} failed:\n{payload}")
        reports[rank] = (payload, correct)
    return reports


def main() -> None:
    """Command line: run the peer once and print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--world-size", type=int, default=16, help="gloo processes (default 16)")
    parser.add_argument("--bytes", type=int, default=64 << 20,
                        help="allreduce size in bytes, float32 (default 64 MiB)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (default 3)")
    args = parser.parse_args()
    if not torch_available():
        print(TORCH_MISSING, file=sys.stderr)
        sys.exit(2)
    try:
        r = gloo_allreduce_seconds(args.world_size, args.bytes, args.repeats)
    except (RuntimeError, ValueError) as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"gloo allreduce on 127.0.0.1, torch {r['torch_version']}, "
          f"{r['world_size']} ranks, {r['bytes'] / 2**20:g} MiB float32")
    print(f"{'repeat':>6} {'wall(s)':>9} {'algbw(GB/s)':>11}")
    for i, s in enumerate(r["seconds"], 1):
        print(f"{i:>6} {s:>9.3f} {r['bytes'] / s / 1e9:>11.3f}")
    print(f"{'best':>6} {r['best_seconds']:>9.3f}\n{'median':>6} {r['median_seconds']:>9.3f}")
    print(f"correct: {'yes' if r['correct'] else 'NO'}")
    if not r["correct"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
