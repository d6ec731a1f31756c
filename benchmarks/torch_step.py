"""Real-mode PyTorch training: what a data-parallel step on two emulated servers costs, against
the same step in one process.

The model is the small residual CNN of ``examples/models/factories.py`` (``small_cnn``,
3x32x32 images, 10 classes). A step of ``--replicas-per-server`` replicas on each of two
DSS 8440s (``dss8440x2``), ``--micro-batch`` samples each: the driver streams every replica
its micro-batch, each card runs forward and backward in PyTorch for its replicas, GCL's
hierarchical allreduce averages the gradients over the emulated links, every replica steps
its SGD optimiser (``cluster/training/torch_replicas``). The peer: the same module, the same
optimiser, one process (PyTorch's default threads), one step on the whole global batch
(what ``--check`` compares with). Each is the median wall time of ``--steps`` steps after
two warm-up steps; the peer runs before the devices start and again after they stop (so
neither competes with the other), and the faster of its two medians counts (the ratio
errs against the emulation). Also the CPU seconds a step takes, of this process and every
device actor, against the peer's: on a shared machine many processes get more of the
cores than one, which flatters the wall ratio, and CPU seconds do not depend on that.
Goal (issue 29): the emulated step at most 3x the single-process one.

    .venv/bin/python benchmarks/torch_step.py
    .venv/bin/python benchmarks/torch_step.py --json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# needs ROOT on the path
from cluster.training.config import TrainConfig  # noqa: E402
from cluster.training.importers.torch_factory import require_torch  # noqa: E402
from cluster.training.placement import replica_ipus  # noqa: E402
from cluster.training.torch_replicas.replica_tasks import LOGITS, batch_loss  # noqa: E402
from cluster.training.torch_replicas.replicas import TorchReplicas, pickled  # noqa: E402
from cluster.training.torch_replicas.run import (  # noqa: E402
    TorchModel,
    load_model,
    replica_work,
    step_data,
)

FACTORY = f"{ROOT / 'examples' / 'models' / 'factories.py'}:small_cnn"
SHAPE = (3, 32, 32)
GOAL_RATIO = 3.0
WARM_UP_STEPS = 2
SGD = {"lr": 0.05, "momentum": 0.9}


def cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user and system) used so far by this process and by ``pids``."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _emulated(model: TorchModel, config: TrainConfig) -> tuple[list[float], float]:
    """Wall seconds of each timed data-parallel step on two emulated DSS 8440s, and CPU
    seconds per step of this process and every device actor."""
    from ipu_node.pod import EmulatedPod

    optimizer = require_torch().optim.SGD
    with EmulatedPod.launch("dss8440x2") as pod:
        payload = pickled(model.module, optimizer, SGD, LOGITS)
        replicas = TorchReplicas(pod, replica_ipus(config, pod.topology).tolist(), payload,
                                 config.algorithm)
        pids = [info["pid"] for info in pod.infos]
        times, cpu = _timed_steps(config, model, lambda x, y: replicas.step(
            replica_work(config, x, y)), lambda: cpu_seconds(pids))
        replicas.close()
    return times, cpu


def _one_process(model: TorchModel, config: TrainConfig) -> tuple[list[float], float]:
    """Wall seconds of each timed step of the same training in this process, and CPU
    seconds per step."""
    torch = require_torch()
    module = copy.deepcopy(model.module)
    optimizer = torch.optim.SGD(module.parameters(), **SGD)

    def step(x: Any, y: Any) -> None:
        optimizer.zero_grad(set_to_none=True)
        batch_loss(module, LOGITS, x, y).backward()
        optimizer.step()

    return _timed_steps(config, model, step, lambda: cpu_seconds([]))


def _timed_steps(config: TrainConfig, model: TorchModel, step: Callable[[Any, Any], Any],
                 cpu: Callable[[], float]) -> tuple[list[float], float]:
    """Wall seconds of each step after the warm-up, and CPU seconds per timed step."""
    times = []
    for index in range(WARM_UP_STEPS + config.steps):
        x, y = step_data(model, config.seed, index, config.global_batch)
        if index == WARM_UP_STEPS:
            cpu_before = cpu()
        started = time.perf_counter()
        step(x, y)
        times.append(time.perf_counter() - started)
    return times[WARM_UP_STEPS:], (cpu() - cpu_before) / config.steps


def measure(replicas_per_server: int, micro_batch: int, steps: int) -> dict[str, Any]:
    """Both timings and their ratio."""
    config = TrainConfig(servers=2, replicas_per_server=replicas_per_server,
                         micro_batch=micro_batch, steps=steps)
    model = load_model(FACTORY, SHAPE)
    before, single_cpu = _one_process(model, config)
    emulated, emulated_cpu = _emulated(model, config)
    after, single_cpu_after = _one_process(model, config)
    single = min(statistics.median(before), statistics.median(after))
    single_cpu = min(single_cpu, single_cpu_after)
    return {"model": FACTORY.rsplit("/", 1)[-1], "topology": "dss8440x2",
            "replicas": config.replicas, "micro_batch": micro_batch,
            "global_batch": config.global_batch, "steps_timed": steps,
            "torch_threads": require_torch().get_num_threads(),
            "emulated_step_seconds": statistics.median(emulated),
            "one_process_step_seconds": single,
            "ratio": statistics.median(emulated) / single,
            "emulated_step_cpu_seconds": emulated_cpu, "one_process_step_cpu_seconds": single_cpu,
            "cpu_ratio": emulated_cpu / single_cpu, "goal_ratio": GOAL_RATIO,
            "load_average": os.getloadavg()[0]}


def main() -> None:
    """Parse the options, measure, print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas-per-server", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    row = measure(options.replicas_per_server, options.micro_batch, options.steps)
    if options.json:
        print(json.dumps(row, indent=2))
        return
    print(f"{row['model']} on {row['topology']}: {row['replicas']} replicas x micro-batch "
          f"{row['micro_batch']} (global batch {row['global_batch']}), median of "
          f"{row['steps_timed']} steps")
    print(f"  emulated step (2 servers): {row['emulated_step_seconds'] * 1e3:8.1f} ms")
    print(f"  one process, whole batch:  {row['one_process_step_seconds'] * 1e3:8.1f} ms "
          f"({row['torch_threads']} torch threads)")
    print(f"  ratio: {row['ratio']:.2f} (goal: at most {GOAL_RATIO:.0f})")
    print(f"  CPU seconds a step: emulated {row['emulated_step_cpu_seconds']:.2f} (this process "
          f"and the device actors), one process {row['one_process_step_cpu_seconds']:.2f}: "
          f"ratio {row['cpu_ratio']:.2f}")
    print(f"  load average (1 min) at the end: {row['load_average']:.1f} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()
