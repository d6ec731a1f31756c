"""How much of this machine's memory a real-mode bench takes, per IPU and byte of size:
the figures behind :data:`ipu_node.bench_fit.HOST_BYTES_PER_BYTE`.

Launches a POD, then runs one size of each collective in real mode (``-n 1 -w 0``, the
check on, as ``ipupod bench --mode real`` runs it) while a thread samples, every few
milliseconds, the resident memory (VmRSS) of this process (the driver: inputs for the
check, results fetched) and of every device actor (tensors, working buffers, link copies,
spare buffers). The peak of their sum over the run, less the sum before it, divided by the
IPUs and the size, is the factor; the driver's and the devices' shares are shown too.
Shared memory (Ray's object store) is counted in each process that touches it, so the
figures err high.

    python benchmarks/bench_memory.py                      # pod16, 48 MiB
    python benchmarks/bench_memory.py --topology dss8440 --size-mib 32 --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.procfs import rss_bytes as _rss_bytes  # noqa: E402 - needs ROOT on the path

COLLECTIVES = ("allreduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all")
SAMPLE_SECONDS = 0.005


class PeakSampler:
    """The highest sum of the processes' resident memory while it runs (and the driver's
    and the devices' parts of it at that moment), sampled every :data:`SAMPLE_SECONDS`."""

    def __init__(self, driver: int, devices: list[int]) -> None:
        self.driver, self.devices = driver, devices
        self.peak = (0, 0, 0)  # total, driver, devices
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> tuple[int, int, int]:
        driver = _rss_bytes(self.driver)
        devices = sum(_rss_bytes(pid) for pid in self.devices)
        return driver + devices, driver, devices

    def _run(self) -> None:
        while not self._stop.is_set():
            now = self.sample()
            if now[0] > self.peak[0]:
                self.peak = now
            time.sleep(SAMPLE_SECONDS)

    def __enter__(self) -> PeakSampler:
        self.peak = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(topology: str, size: int, check: bool) -> dict[str, Any]:
    """Each collective's peak extra memory over a sweep up to ``size`` bytes (a quarter,
    a half, the whole: smaller sizes leave spare buffers behind), per IPU and byte of
    ``size``; a fresh POD for each collective."""
    out: dict[str, Any] = {"topology": topology, "size_bytes": size, "check": check,
                           "collectives": {}}
    for name in COLLECTIVES:
        ipus, peak = _sweep_peak(topology, name, [size // 4, size // 2, size], check)
        total, driver, devices = (part / (ipus * size) for part in peak)
        out["ipus"] = ipus
        out["collectives"][name] = {"factor": total, "driver_factor": driver,
                                    "devices_factor": devices}
    return out


def _sweep_peak(topology: str, name: str, sizes: list[int],
                check: bool) -> tuple[int, tuple[int, ...]]:
    """The IPUs, and the peak extra resident bytes (total, driver, devices) of a real
    sweep of ``sizes`` of collective ``name`` on a POD launched for it."""
    import ray

    from gcl.bench_spec import BenchSpec, Runs, SizeRange
    from gcl.collectives import collective
    from ipu_node.pod import EmulatedPod
    from ipu_node.real_bench import run_real

    pod = EmulatedPod.launch(topology)
    try:
        sampler = PeakSampler(os.getpid(), [int(info["pid"]) for info in pod.infos])
        before = sampler.sample()
        with sampler:
            spec = BenchSpec(collective(name), SizeRange(min(sizes), max(sizes)),
                             runs=Runs(check=check))  # the sizes: powers of two apart
            list(run_real(pod, spec.place(pod.topology)))
        return pod.topology.ipu_count, tuple(p - b for p, b in zip(sampler.peak, before))
    finally:
        pod.shutdown()
        ray.shutdown()


def main() -> None:
    """Command line: measure, print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="pod16")
    parser.add_argument("--size-mib", type=int, default=48)
    parser.add_argument("--no-check", action="store_true", help="as -c 0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.topology, args.size_mib << 20, not args.no_check)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"# {result['topology']} ({result['ipus']} IPUs), {args.size_mib} MiB, "
          f"check {'on' if result['check'] else 'off'}: peak extra bytes per IPU and byte")
    print(f"{'collective':>15} {'total':>7} {'driver':>7} {'devices':>7}")
    for name, figures in result["collectives"].items():
        print(f"{name:>15} {figures['factor']:>7.2f} {figures['driver_factor']:>7.2f} "
              f"{figures['devices_factor']:>7.2f}")


if __name__ == "__main__":
    main()
