"""What ``ipupod plan`` prints: the fastest layouts that fit, each with its step by part,
samples per second, model-FLOPs utilisation, memory per IPU and the ``ipupod train``
command that runs it; then the near misses and what each overflows. As text or JSON.

Model-FLOPs utilisation is the model's training FLOPs a step (forward and backward,
``3 x`` forward, recomputation not counted, Narayanan et al. 2021's convention) over the
IPUs' peak for the workload's arithmetic (the catalogue's: a GC200's 250 TFLOPS in
float16) times the step's simulated seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cluster.model.units import plural
from cluster.training.memory_plan import StageMemory, decimal
from cluster.training.plan import TrainPlan
from cluster.training.planner.search import Miss, Priced, Search
from cluster.training.planner.space import Layout
from cluster.training.step_parts import parts_spent
from cluster.training.workloads import peak_flops_per_second

SHOWN_SHARE = 1e-9  # a part of less than this share of its step is rounding, not shown
PHASED = ("a model this size needs pipeline stages of tensor groups over more than a server "
          "or rack, not in the emulator yet, or phased execution on IPU-M2000s (--phased; "
          "with tensor groups of up to a POD64 rack's 64 IPUs)")


@dataclass(frozen=True)
class Question:
    """What was asked: the model and topology (as given), the global batch and why."""

    model: str
    topology: str
    sequence_length: int | None
    global_batch: int
    batch_reason: str
    top: int


def train_command(question: Question, layout: Layout) -> str:
    """The ``ipupod train`` command that runs ``layout`` as the search priced it."""
    shape = layout.shape
    words = ["ipupod train", f"--model {question.model}", f"--topology {question.topology}"]
    if question.sequence_length is not None:
        words.append(f"--sequence-length {question.sequence_length}")
    if shape.tensor_parallel.on:
        words.append(f"--tensor-parallel {shape.tensor_parallel}")
    if not shape.tensor_parallel.on or shape.stages > 1:
        words.append(f"--ipus-per-replica {shape.ipus}")
    if shape.expert_parallel > 1:
        words.append(f"--expert-parallel {shape.expert_parallel}")
    words += [f"--replicas-per-server {layout.replicas_per_server}",
              f"--micro-batch {layout.micro_batch}",
              f"--gradient-accumulation {layout.accumulation}",
              "--recompute" if layout.recompute else "--no-recompute",
              f"--optimizer-state {layout.optimizer_state}"] + (
                  ["--phased"] if layout.phased else [])
    return " ".join(words)


def peak(plan: TrainPlan) -> tuple[float, str]:
    """The peak FLOPS of one IPU for the workload's arithmetic, and its name."""
    processor = plan.topology.ipu_processors[0]
    dtype = plan.workload.partials_dtype
    return peak_flops_per_second(processor, dtype), f"{processor.name} {dtype}"


def _layout_record(plan: TrainPlan, layout: Layout) -> dict[str, Any]:
    """A layout's settings, as ``--json`` names them."""
    shape = layout.shape
    return {"tensor_parallel": str(shape.tensor_parallel), "pipeline_stages": shape.stages,
            "expert_parallel": shape.expert_parallel,
            "ipus_per_replica": shape.ipus, "replicas": plan.config.replicas,
            "replicas_per_server": layout.replicas_per_server,
            "ipus": plan.config.replicas * shape.ipus, "micro_batch": layout.micro_batch,
            "gradient_accumulation": layout.accumulation, "recompute": layout.recompute,
            "optimizer_state": str(layout.optimizer_state), "phased": layout.phased}


def _memory(stages: list[StageMemory]) -> StageMemory:
    """The IPU that holds the most."""
    return max(stages, key=lambda stage: stage.use.total_bytes)


def priced_record(question: Question, found: Priced) -> dict[str, Any]:
    """One fitting layout for ``--json``: settings, step parts (seconds), throughput,
    utilisation, the fullest IPU's memory and the command."""
    plan, step = found.plan, found.step
    seconds = step.sim_seconds
    flops = plan.workload.training_flops * question.global_batch
    ipus = plan.config.replicas * found.layout.shape.ipus
    fullest = _memory(found.stages)
    return {**_layout_record(plan, found.layout), "step_seconds": seconds,
            "parts_seconds": step.parts(), "samples_per_second": question.global_batch / seconds,
            "model_flops_utilisation": flops / (ipus * peak(plan)[0] * seconds),
            "memory_per_ipu_bytes": fullest.use.total_bytes,
            "memory_parts_bytes": asdict(fullest.use), "capacity_bytes": fullest.capacity_bytes,
            "command": train_command(question, found.layout)}


def miss_record(miss: Miss) -> dict[str, Any]:
    """One near miss for ``--json``: settings and the stage that overflows, by how much."""
    stage = miss.stage
    return {**_layout_record(miss.plan, miss.layout), "stage": stage.stage,
            "ipu": stage.ipu_name, "layers": stage.layers,
            "needs_bytes": stage.use.total_bytes, "capacity_bytes": stage.capacity_bytes,
            "over_bytes": stage.use.total_bytes - stage.capacity_bytes,
            "memory_parts_bytes": asdict(stage.use), "why": why_not(miss)}


def near_misses(found: Search, count: int) -> list[Miss]:
    """The nearest miss of each replica shape, nearest first, at most ``count``."""
    nearest: dict[object, Miss] = {}
    for miss in found.misses:  # nearest first
        nearest.setdefault(miss.layout.shape, miss)
    return list(nearest.values())[:count]


def why_not(miss: Miss) -> str:
    """What overflows: the stage, its IPU, what fills it and by how much."""
    stage = miss.stage
    parts = ", ".join(f"{name.removesuffix('_bytes')} {decimal(value)}"
                      for name, value in asdict(stage.use).items() if value)
    return (f"stage {stage.stage} ({stage.layers}) needs {decimal(stage.use.total_bytes)} on "
            f"IPU {stage.ipu_name}, {decimal(stage.use.total_bytes - stage.capacity_bytes)} "
            f"more than its {decimal(stage.capacity_bytes)} of In-Processor-Memory ({parts})")


def verdict(found: Search) -> str:
    """One line: how many layouts fit, or why none does."""
    fit = len(found.fitting)
    if fit and fit == len(found.priced):
        return f"{fit} of {found.tried} layouts fit, each priced"
    if fit:
        return (f"{fit} of {found.tried} layouts fit, the {len(found.priced)} priced that "
                "could be among the fastest (the others' compute alone is slower)")
    if not found.misses:
        return f"none of {found.tried} layouts can run on this topology"
    return (f"no layout fits: the nearest of {found.tried}, {_shape_words(found.misses[0])}, "
            f"{why_not(found.misses[0])}; {PHASED}")


def _shape_words(miss: Miss) -> str:
    """A layout in words: ``8 replicas x tensor-parallel 4x4, micro-batch 1``."""
    layout = miss.layout
    return (f"{plural(miss.plan.config.replicas, 'replica')} x {layout.shape}, micro-batch "
            f"{layout.micro_batch}, {'recomputation' if layout.recompute else 'no recompute'}, "
            f"optimizer state {layout.optimizer_state}{', phased' if layout.phased else ''}")


def as_json(question: Question, found: Search, base: TrainPlan) -> dict[str, Any]:
    """The whole answer for ``--json``."""
    flops, name = peak(base)
    return {"model": question.model, "topology": question.topology,
            "sequence_length": question.sequence_length,
            "global_batch": question.global_batch, "global_batch_reason": question.batch_reason,
            "model_flops_per_step": base.workload.training_flops * question.global_batch,
            "peak_flops_per_second_per_ipu": flops, "peak": name,
            "tried": found.tried, "fit": len(found.fitting), "priced": len(found.priced),
            "verdict": verdict(found),
            "layouts": [priced_record(question, p) for p in found.priced[:question.top]],
            "near_misses": [miss_record(m) for m in near_misses(found, question.top)]}


def as_text(question: Question, found: Search, base: TrainPlan) -> list[str]:
    """The answer as lines of text."""
    flops, name = peak(base)
    model_flops = base.workload.training_flops * question.global_batch
    lines = [f"# {question.model} on {question.topology}: global batch "
             f"{question.global_batch} ({question.batch_reason}); {verdict(found)}"
             + ("; priced as `ipupod train` prices them, times simulated"
                if found.priced else ""),
             f"# model FLOPs utilisation: {model_flops:.3g}"
             f" model FLOPs a step (recomputation not counted) over IPUs x {flops / 1e12:g} "
             f"TFLOPS ({name} peak) x step time"]
    for rank, found_layout in enumerate(found.priced[:question.top], 1):
        lines += _priced_lines(rank, priced_record(question, found_layout))
    misses = near_misses(found, question.top)
    if misses:
        lines.append("# near misses (the nearest of each replica shape):")
    lines += [f"- {_shape_words(miss)}: {why_not(miss)}" for miss in misses]
    return lines


def _priced_lines(rank: int, record: dict[str, Any]) -> list[str]:
    """One fitting layout: settings, step by part, throughput, memory, command."""
    stages, tensor = record["pipeline_stages"], record["tensor_parallel"]
    shape = " x ".join(([f"{stages}-stage pipeline"] if stages > 1 else [])
                       + ([f"tensor-parallel {tensor}"] if tensor != "1" else [])) or "1 IPU"
    if record["expert_parallel"] > 1:
        shape += f", experts over {record['expert_parallel']} replicas"
    parts = ", ".join(f"{part.title} {part.seconds(record['parts_seconds']):.4g} s"
                      for part in parts_spent([record["parts_seconds"]])
                      if part.seconds(record["parts_seconds"]) >= SHOWN_SHARE * record[
                          "step_seconds"] or part.always)
    return [f"{rank}. {plural(record['replicas'], 'replica')} x {shape} ({record['ipus']} IPUs), "
            f"micro-batch {record['micro_batch']}, accumulation "
            f"{record['gradient_accumulation']}, "
            f"{'recomputation' if record['recompute'] else 'no recomputation'}, optimizer "
            f"state {record['optimizer_state']}{', phased' if record['phased'] else ''}",
            f"   step {record['step_seconds']:.4g} s: {parts}",
            f"   {record['samples_per_second']:.4g} samples/s, model FLOPs utilisation "
            f"{record['model_flops_utilisation']:.1%}, memory per IPU "
            f"{decimal(record['memory_per_ipu_bytes'])} of {decimal(record['capacity_bytes'])}",
            f"   {record['command']}"]
