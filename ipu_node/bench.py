"""One benchmark, phantom or real: the function ``ipupod bench`` and the service both run
a :class:`gcl.bench_spec.PlacedBench` with. Ray is imported only for real mode (through
:mod:`ipu_node.real_bench`), so a phantom bench starts nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from gcl.bench_rows import BenchRow, run_phantom
from gcl.bench_spec import PlacedBench
from gcl.modes import Mode
from gcl.phantom import Timing
from gcl.schedule import Schedule

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod


def run_bench(bench: PlacedBench, pod: EmulatedPod | None = None, *,
              on_phase: Callable[[int, int], None] | None = None,
              on_costed: Callable[[Schedule, Timing], None] | None = None,
              ) -> Iterator[BenchRow]:
    """The rows of ``bench``, one per size as it finishes: costed here in phantom mode
    (``on_phase`` hears of progress through each size's phases), run on ``pod``'s devices
    in real mode (``bench`` placed on ``pod.topology``). ``on_costed`` gets each size's
    schedule and simulated timing (a trace)."""
    if bench.spec.mode is not Mode.REAL:
        return run_phantom(bench, on_phase=on_phase, on_costed=on_costed)
    if pod is None:
        raise ValueError("a real-mode bench runs on a launched POD's devices: pass the pod")
    from ipu_node.real_bench import run_real  # Ray: only for real mode

    return run_real(pod, bench, on_costed=on_costed)
