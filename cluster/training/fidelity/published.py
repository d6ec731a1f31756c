"""The published step times the emulator is checked against, and the runs they come from.

``published_steps.json`` beside this module is derived from the raw MLPerf Training logs
of Graphcore's closed-division submissions (v1.0 and v1.1, MLCommons' public results
repositories) by ``benchmarks/mlperf_published.py`` with the method of :mod:`.mllog`;
each entry keeps its repository, commit, logs and the submission files that say how it
ran (hosts, IPUs per replica, micro-batch, where the optimiser state lives).
:func:`train_config` turns an entry into the emulator's :class:`TrainConfig`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, cast, get_args, get_origin, get_type_hints

from cluster.errors import UserError, quoted
from cluster.model.files import open_regular
from cluster.model.hardware import IPUS_PER_POD64
from cluster.training.config import TrainConfig
from cluster.training.kinds import ModelKind
from cluster.training.model_ref import model_ref
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.schedules import DEFAULT as DEFAULT_SCHEDULE
from cluster.training.pipeline.schedules import popart
from cluster.training.workloads import BUILTINS
from gcl.algorithms.ring import ClockwiseRing
from gcl.modes import Mode

TABLE = Path(__file__).with_name("published_steps.json")
BERT_SEQUENCE_LENGTH = 512  # MLPerf's BERT-Large: sequence 512 (the logs' max_sequence_length)
MAX_TABLE_BYTES = 1 << 20
MAX_TABLE_NUMBER = 10**9  # no whole number in a table comes near: IPUs, steps, layers
ALGORITHM = ClockwiseRing.name
"""The gradient allreduce of the published runs: one ring through every replica, racks
chained over their GW-Links. The submissions ran Poplar SDK 2.1 and 2.3 (systems/*.json)
on partitions with ring routing (``vipu create partition ... --routing ring-swnc``, the
v1.1 BERT POD128 script); GCL builds its collectives on rings ("the required ring
structure for communication", Graphcore's memory and performance optimisation guide,
section 7), and its three-phase collectives across IPU-Link domains were only scheduled
properly from SDK 3.0 (GCL release notes 3.0.0). A ring that crosses racks moves every
byte of the gradient over the GW-Link path, where the hierarchical algorithm moves a
1/64 share: that is the cost the larger systems pay (docs/fidelity.md)."""

OPTIONAL = {"final_stage_on_first_ipu": False}  # fields a table may leave out, as tables
# written before they existed do


@dataclass(frozen=True)
class PublishedStep:
    """One published configuration: how it ran and its median step time (seconds)."""

    round: str
    system: str
    model: str
    ipus: int
    topology: str
    hosts: int
    ipus_per_replica: int
    micro_batch: int
    gradient_accumulation: int
    optimizer_state: str
    layers_per_ipu: list[int]  # the recipe's layers on each pipeline stage; [] balanced
    final_stage_on_first_ipu: bool  # the recipe's last stage back on the first IPU
    logged_global_batch: int
    global_batch: int
    step_seconds: float
    step_seconds_min: float
    step_seconds_max: float
    runs: int
    method: str
    repository: str
    commit: str
    logs: str
    recipe: str

    @property
    def label(self) -> str:
        """``v1.1 resnet50 pod128``: how tables name it."""
        return f"{self.round} {self.model} {self.topology}"


_FIELD_TYPES = get_type_hints(PublishedStep)  # each field's type, resolved from its annotation


def load_published(path: Path = TABLE) -> list[PublishedStep]:
    """The table at ``path`` (default: the one shipped); a UserError naming the entry
    and field if it is not a table of published steps."""
    try:
        with open_regular(path) as handle:  # a FIFO is refused, not waited on
            text = handle.read(MAX_TABLE_BYTES + 1)
        if len(text) > MAX_TABLE_BYTES:
            raise UserError(f"{path}: over {MAX_TABLE_BYTES >> 10} KiB, not a table of "
                            "published steps")
        raw = json.loads(text.decode("utf-8"))
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from None
    except ValueError as error:
        raise UserError(f"{path} is not JSON: {error}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a table of published steps") from None
    rows = raw.get("configurations") if isinstance(raw, dict) else None
    version = raw.get("version") if isinstance(raw, dict) else None
    if not isinstance(rows, list) or type(version) is not int or version != 1:
        raise UserError(f"{path}: a table of published steps has version 1 and a list of "
                        "configurations")
    return [_entry(row, f"{path} configuration {i}") for i, row in enumerate(rows)]


def _entry(row: Any, where: str) -> PublishedStep:
    if not isinstance(row, dict):
        raise UserError(f"{where} is not an object")
    names = [field.name for field in fields(PublishedStep)]
    unknown = [str(key) for key in row if key not in names]
    if unknown:
        raise UserError(f"{where}: unknown field {quoted(unknown[0], 40)}; the fields are "
                        f"{', '.join(names)}")
    values: dict[str, Any] = {}
    for field in fields(PublishedStep):
        value = row.get(field.name, OPTIONAL.get(field.name))
        if not _is_a(value, _FIELD_TYPES[field.name]):
            raise UserError(f"{where}: {field.name} must be a {field.type}, not "
                            f"{quoted(value, 40)}")
        if any(type(n) is int and abs(n) > MAX_TABLE_NUMBER  # past a float, or near it
               for n in (value if isinstance(value, list) else [value])):
            raise UserError(f"{where}: {field.name} is out of range (at most "
                            f"{MAX_TABLE_NUMBER:,})")
        values[field.name] = value
    entry = PublishedStep(**values)
    times = (entry.step_seconds, entry.step_seconds_min, entry.step_seconds_max)
    if not all(math.isfinite(t) and t > 0 for t in times) or min(
            entry.ipus, entry.ipus_per_replica, entry.micro_batch, entry.hosts,
            entry.gradient_accumulation, entry.runs) < 1:
        raise UserError(f"{where}: counts and the step times must be positive (and finite)")
    if entry.model not in BUILTINS or ModelKind.of(entry.model) is ModelKind.MLP:
        workloads = (m for m in BUILTINS if ModelKind.of(m) is ModelKind.WORKLOAD)
        raise UserError(f"{where}: model is one of the built-in workloads "
                        f"({', '.join(workloads)}), not {quoted(entry.model, 40)}")
    if entry.topology != f"pod{entry.ipus}" or entry.ipus % entry.ipus_per_replica:
        raise UserError(f"{where}: topology must be pod{entry.ipus} (its ipus), in whole "
                        f"replicas of ipus_per_replica IPUs")
    return entry


def _is_a(value: Any, hint: Any) -> bool:
    """Whether JSON ``value`` is of the field type ``hint`` (``int``, ``float``, ``str``,
    ``bool`` or ``list[int]``): a bool is no number, a whole number is a float, a list's
    items are of its item type exactly."""
    kind = get_origin(hint) or hint
    if isinstance(value, bool) != (kind is bool):
        return False
    if not isinstance(value, (int, float) if kind is float else kind):
        return False
    items = get_args(hint)
    return not items or (isinstance(value, list)
                         and all(type(item) is items[0] for item in value))


def train_config(entry: PublishedStep, efficiency_scale: float = 1.0) -> TrainConfig:
    """The emulator's run of ``entry``: its POD preset, one replica per
    ``ipus_per_replica`` IPUs filling every rack, its micro-batch and accumulation, its
    stages (the last back on the first IPU where the recipe puts it there), with
    recomputation as both recipes run; BERT at sequence 512 with PopART's lock-step
    pipeline (``popart``), as its PopART recipe runs. ResNet-50's recipe is TensorFlow's,
    so a pipelined ResNet entry keeps the default schedule."""
    per_rack = min(entry.ipus, IPUS_PER_POD64)  # a published rack: an IPU-POD64
    bert = entry.model.startswith("bert")
    return TrainConfig(
        model=model_ref(entry.model), topology=entry.topology, mode=Mode.PHANTOM,
        servers=entry.ipus // per_rack, replicas_per_server=per_rack // entry.ipus_per_replica,
        ipus_per_replica=entry.ipus_per_replica, micro_batch=entry.micro_batch,
        accumulation=entry.gradient_accumulation,
        # a known name becomes its OptimizerState in TrainConfig; validate names another
        optimizer_state=cast(OptimizerState, entry.optimizer_state),
        sequence_length=BERT_SEQUENCE_LENGTH if bert else None,
        layers_per_ipu=tuple(entry.layers_per_ipu) or None,
        final_stage_on_first_ipu=entry.final_stage_on_first_ipu,
        pipeline_schedule=popart.NAME if bert else DEFAULT_SCHEDULE, recompute=True,
        efficiency_scale=efficiency_scale, algorithm=ALGORITHM)
