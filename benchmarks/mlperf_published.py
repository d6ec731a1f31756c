"""Derive the published step times of Graphcore's MLPerf Training runs from the raw logs.

Usage (clones of the MLCommons results repositories, any folder names)::

    .venv/bin/python benchmarks/mlperf_published.py \\
        --results v1.0=PATH/training_results_v1.0 --results v1.1=PATH/training_results_v1.1 \\
        --out cluster/training/fidelity/published_steps.json

For every closed-division result folder of Graphcore's (``Graphcore/results/<system>/
<benchmark>/result_*.txt``) it reads each run's MLLOG events and takes the run's step time
by the method of :mod:`cluster.training.fidelity.mllog`: the median seconds per step over
the run's steady epochs (ResNet-50: each logged epoch holds ``logs_per_epoch`` whole
``session.run`` calls) or blocks (BERT: steps counted exactly on a run of several
instances, else real sequences over the real sequences a step trains), and the
configuration's as the median over its runs. BERT's real sequences per logged sample
(the packing) is measured first, on the step-counted runs (v1.1's IPU-POD128), and
applied to the others; the table records it. What the logs do not say (hosts, IPUs per
replica, micro-batch, where the optimiser state lives) comes from the submission's own
launch scripts and configurations, named per entry in :data:`RECIPES`; the script checks
them against the logged global batch and gradient accumulation and stops if they
disagree. The table it writes keeps its provenance: repository, commit, the logs' paths
and the recipe's source.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster.errors import UserError
from cluster.training.fidelity.mllog import (
    LOGS_PER_EPOCH,
    Event,
    RunSteps,
    median_run,
    packing_ratio,
    parse_events,
    run_steps,
)

REPOSITORY = "mlcommons/training_results_{round}"
MAX_LOG_BYTES = 64 << 20


@dataclass(frozen=True)
class Recipe:
    """How one published system ran, from its submission's files (``source``).

    ``samples_per_sequence``: what one emulated sample is. ResNet-50: an image (1).
    BERT: the runs train packed sequences (``avg_seq_per_pack`` 2, the configs'
    ``use_prepacked_pretraining_dataset``), and the log counts sequences; the emulator's
    sample is one 512-token pack, so a pack is 2 logged sequences.

    ``steps_counted``: BERT's blocks end on whole steps, as in a run of several poprun
    instances (``bert.py`` v1.1 L1236: ``iteration.count * iteration.global_batch_size``);
    otherwise on real sequences (L1237; every v1.0 run logs the real count)."""

    model: str
    hosts: int
    ipus_per_replica: int
    micro_batch: int
    optimizer_state: str  # "sharded" (RTS) or "sharded-streaming" (RTS and off chip)
    samples_per_sequence: int
    source: str
    steps_counted: bool = False


_RN = "Graphcore/benchmarks/resnet/implementations/tensorflow/"
_BERT = "Graphcore/benchmarks/bert/implementations/popart/"


def _resnet(pod: int, config: str) -> Recipe:
    """ResNet-50: one IPU a replica, micro-batch 20 (configs.yml ``config``), one host per
    16 IPUs (run_and_time.sh: a single host for 16 replicas, 4 for 64, 8 for 128, 16 for
    256)."""
    return Recipe("resnet50", pod // 16, 1, 20, "in-processor", 1,
                  f"{_RN}configs.yml {config}; {_RN}run_and_time.sh")


RECIPES: dict[tuple[str, str], Recipe] = {
    ("v1.0", "ipu-pod16-TF1"): _resnet(16, "mk2_resnet50_mlperf_pod16_bs20"),
    ("v1.0", "ipu-pod64-TF1"): _resnet(64, "mk2_resnet50_mlperf_pod64_bs20"),
    ("v1.1", "ipu-pod16-TF1"): _resnet(16, "mk2_resnet50_mlperf_pod16_lars"),
    ("v1.1", "ipu-pod64-TF1"): _resnet(64, "mk2_resnet50_mlperf_pod64_lars"),
    ("v1.1", "ipu-pod128-TF1"): _resnet(128, "mk2_resnet50_mlperf_pod128_lars"),
    ("v1.1", "ipu-pod256-TF1"): _resnet(256, "mk2_resnet50_mlperf_pod256_lars"),
    # BERT-Large, sequence 512, packed (2 sequences a pack), micro-batch 2 packs, the
    # optimiser state sharded over the replicas (replicated_tensor_sharding): 4 IPUs a
    # replica with the state off chip on a POD16 (optimizer_state_offchip), 8 IPUs a
    # replica with it on chip from POD64 on (configs/mk2/podN-closed.json); one host up to
    # POD64, two for POD128
    # (systems/*.json number_of_nodes; create_submission.py's poprun --host).
    ("v1.0", "ipu-pod16-POPART-closed"): Recipe("bert-large", 1, 4, 2, "sharded-streaming", 2,
                                                _BERT + "configs/mk2/pod16-closed.json"),
    ("v1.0", "ipu-pod64-POPART-closed"): Recipe("bert-large", 1, 8, 2, "sharded", 2,
                                                _BERT + "configs/mk2/pod64-closed.json"),
    ("v1.1", "ipu-pod16-POPART-closed"): Recipe("bert-large", 1, 4, 2, "sharded-streaming", 2,
                                                _BERT + "configs/mk2/pod16-closed.json"),
    ("v1.1", "ipu-pod64-POPART-closed"): Recipe("bert-large", 1, 8, 2, "sharded", 2,
                                                _BERT + "configs/mk2/pod64-closed.json"),
    ("v1.1", "ipu-pod128-POPART-closed"): Recipe("bert-large", 2, 8, 2, "sharded", 2,
                                                 _BERT + "configs/mk2/pod128-closed.json; "
                                                 + _BERT + "create_submission.py",
                                                 steps_counted=True),
}


def _stages(clone: Path, recipe: Recipe) -> tuple[list[int], bool]:
    """A BERT recipe's layers per pipeline stage and whether its last stage runs back on
    the first IPU (ResNet: ``[]``, one IPU a replica). The emulated bert-large is
    embeddings, then each encoder's attention and feed-forward halves in order, then heads
    and loss. Graphcore's ``bert_model.py`` puts the embeddings on IPU 0 as pipeline
    stage 0 and the heads (masked LM, sharing the embeddings' word table) on IPU 0 as the
    last stage: v1.1 places the halves by ``att_ffn_placement`` (``[ipu, [attention,
    feed-forward]]`` per stage from ``encoder_start_pipeline_stage``, the heads joining
    the last entry's stage when it is on IPU 0); v1.0 by ``layers_per_ipu`` whole
    encoders per IPU from ``encoder_start_ipu`` (stage = IPU, those on IPU 0 joining the
    embeddings), the heads a stage of their own after the last encoder's."""
    if recipe.ipus_per_replica == 1:
        return [], False
    config = clone / recipe.source.split(";")[0].strip()
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
        if "att_ffn_placement" in settings:
            counts, ipus = _v11_stages(settings)
        else:
            counts, ipus = _v10_stages(settings)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        raise UserError(f"{config}: no att_ffn_placement or layers_per_ipu to place the "
                        f"layers ({error})") from None
    k = recipe.ipus_per_replica
    if ipus != [*range(k), 0]:
        raise UserError(f"{config}: its stages run on IPUs {ipus}; the emulator runs stage s "
                        f"on IPU s of {k} and the last back on IPU 0")
    return counts, True


def _v11_stages(settings: dict[str, Any]) -> tuple[list[int], list[int]]:
    start = int(settings.get("encoder_start_pipeline_stage", 1))
    if start not in (0, 1):
        raise ValueError(f"encoder_start_pipeline_stage {start}: stages before the encoders "
                         "beyond the embeddings'")
    placement = [(int(ipu), int(att) + int(ffn))
                 for ipu, (att, ffn) in settings["att_ffn_placement"]]
    counts, ipus = ([1], [0]) if start == 1 else ([], [])
    counts += [halves for _, halves in placement]
    ipus += [ipu for ipu, _ in placement]
    if start != 1:  # the embeddings join the first encoders' stage
        counts[0] += 1
    if ipus[-1] == 0:
        counts[-1] += 2  # the heads and the loss, on the last stage
    else:
        counts, ipus = [*counts, 2], [*ipus, 0]
    return counts, ipus


def _v10_stages(settings: dict[str, Any]) -> tuple[list[int], list[int]]:
    start = int(settings.get("encoder_start_ipu", 0))
    per_ipu = [2 * int(n) for n in settings["layers_per_ipu"]]
    if start > 1:
        raise ValueError("embeddings split over IPUs (encoder_start_ipu above 1)")
    if start == 0:
        counts = [1 + per_ipu[0], *per_ipu[1:]]
    else:
        counts = [1, *per_ipu]
    return [*counts, 2], [*range(len(counts)), 0]


def _git(folder: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                            check=False)
    return result.stdout.strip() if result.returncode == 0 else ""


def _read_events(path: Path) -> list[Event]:
    if path.stat().st_size > MAX_LOG_BYTES:
        raise UserError(f"{path}: over {MAX_LOG_BYTES >> 20} MiB, not one run's result file")
    with path.open(encoding="utf-8", errors="replace") as lines:
        return parse_events(lines)


def _logs(clone: Path, system: str) -> list[Path]:
    return sorted((clone / "Graphcore" / "results" / system).glob("*/result_*.txt"))


def _check_clone(round_name: str, clone: Path) -> None:
    if not (clone / "Graphcore" / "results").is_dir():
        raise UserError(f"{clone} has no Graphcore/results folder: give a clone of "
                        f"{REPOSITORY.format(round=round_name)}")


def measure_packing(clones: dict[str, Path]) -> tuple[float, str] | None:
    """BERT's real sequences per logged sample, the median over the step-counted runs'
    (:func:`packing_ratio`), and which runs it came from; None without such runs."""
    ratios, sources = [], []
    for (round_, system), recipe in RECIPES.items():
        if recipe.steps_counted and round_ in clones:
            logs = _logs(clones[round_], system)
            ratios += [packing_ratio(_read_events(log), str(log)) for log in logs]
            sources += [f"{round_} {system} ({len(logs)} runs)"] if logs else []
    if not ratios:
        return None
    return statistics.median(ratios), "; ".join(sources)


def derive_round(round_name: str, clone: Path,
                 sequences_per_sample: float | None = None) -> list[dict[str, Any]]:
    """Every configuration of :data:`RECIPES` that ``clone`` (a results repository of
    ``round_name``) holds, with its step time and provenance; BERT's real-sequence runs
    need ``sequences_per_sample`` (:func:`measure_packing`)."""
    _check_clone(round_name, clone)
    rows = []
    for (round_, system), recipe in RECIPES.items():
        logs = _logs(clone, system)
        if round_ != round_name or not logs:
            continue
        packing = None
        if recipe.model.startswith("bert") and not recipe.steps_counted:
            if sequences_per_sample is None:
                counted = ", ".join(f"{r} {name}" for (r, name), other in RECIPES.items()
                                    if other.steps_counted)
                raise UserError(f"{round_name} {system}: its blocks count real sequences; "
                                f"the packing is measured on the step-counted runs "
                                f"({counted}): give the results that hold their logs too")
            packing = sequences_per_sample
        runs = [run_steps(_read_events(log), str(log), sequences_per_sample=packing)
                for log in logs]
        rows.append(_row(round_name, system, recipe, runs, logs, clone))
    return rows


def _row(round_name: str, system: str, recipe: Recipe, runs: list[RunSteps],
         logs: list[Path], clone: Path) -> dict[str, Any]:
    first = runs[0]
    ipus = int(system.split("-")[1].removeprefix("pod"))
    replicas = ipus // recipe.ipus_per_replica
    accumulation = first.accumulation or 0
    emulated_batch = replicas * recipe.micro_batch * accumulation
    if emulated_batch * recipe.samples_per_sequence != first.global_batch:
        raise UserError(f"{round_name} {system}: the recipe's {replicas} replicas x micro-batch "
                        f"{recipe.micro_batch} x accumulation {accumulation} x "
                        f"{recipe.samples_per_sequence} is not the logged global batch "
                        f"{first.global_batch}: fix RECIPES")
    steps = [run.step_seconds for run in runs]
    stages, wrapped = _stages(clone, recipe)
    return {
        "round": round_name, "system": system, "model": recipe.model, "ipus": ipus,
        "topology": f"pod{ipus}", "hosts": recipe.hosts,
        "ipus_per_replica": recipe.ipus_per_replica, "micro_batch": recipe.micro_batch,
        "gradient_accumulation": accumulation, "optimizer_state": recipe.optimizer_state,
        "layers_per_ipu": stages, "final_stage_on_first_ipu": wrapped,
        "logged_global_batch": first.global_batch, "global_batch": emulated_batch,
        "step_seconds": round(median_run(runs), 6), "step_seconds_min": round(min(steps), 6),
        "step_seconds_max": round(max(steps), 6), "runs": len(runs),
        "method": _method(first.method, recipe),
        "repository": REPOSITORY.format(round=round_name.replace("v", "v")),
        "commit": _git(clone, "rev-parse", "HEAD"),
        "logs": f"Graphcore/results/{system}/{logs[0].parent.name}/result_*.txt",
        "recipe": recipe.source,
    }


def _method(method: str, recipe: Recipe) -> str:
    if method == "epochs":
        return f"epochs: steady epochs of {LOGS_PER_EPOCH} session.run calls"
    return "blocks: " + ("steps counted" if recipe.steps_counted else "real sequences")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", action="append", required=True, metavar="ROUND=PATH",
                        help="a results clone per round, e.g. v1.1=../training_results_v1.1")
    parser.add_argument("--out", type=Path, help="write the table here (JSON); else print it")
    args = parser.parse_args(argv)
    try:
        clones = {}
        for item in args.results:
            round_name, _, path = item.partition("=")
            if round_name not in {"v1.0", "v1.1"} or not path:
                raise UserError(f"--results takes v1.0=PATH or v1.1=PATH, not {item!r}")
            _check_clone(round_name, Path(path))
            clones[round_name] = Path(path)
        packing = measure_packing(clones)
        ratio = packing[0] if packing else None
        rows = [row for round_name, clone in clones.items()
                for row in derive_round(round_name, clone, ratio)]
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    table: dict[str, Any] = {"version": 1, "method": "cluster/training/fidelity/mllog.py",
                             "command": "benchmarks/mlperf_published.py"}
    if packing:
        table["bert_sequences_per_logged_sample"] = {"value": round(packing[0], 6),
                                                     "measured_on": packing[1]}
    table["configurations"] = rows
    text = json.dumps(table, indent=1) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
