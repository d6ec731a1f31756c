"""What vulture (dead code, ``.ci/run``) cannot see used: names called by a framework, enum
members chosen by text, and fields of records kept with their source. Each line names a
real attribute, so mypy fails when one goes away (then delete its line here).

Click commands, pytest fixtures and registered plugins are found by their decorators
(``ignore_decorators`` in ``pyproject.toml``), not listed here.
"""

from hpack import Encoder

from benchmarks.phantom_speed import Case
from cluster.cli.main import LazyGroup
from cluster.model.hardware import IpuM2000, Processor
from cluster.service.audit import _PrivateRotatingFile
from cluster.service.authentication import Authenticator
from cluster.service.control_server import ControlService
from cluster.service.metrics import PodCollector
from cluster.service.service_error import Status
from cluster.training.fidelity.published import PublishedStep
from cluster.training.torch_replicas.poptorch_style import Options
from cluster.training.workloads.compute import Efficiencies
from gcl.collectives import ReduceOp
from gcl.groups import CommGroupType
from ipu_node.card import Card
from ipu_node.control import DeviceControl
from ipu_node.device_health import HealthState
from ipu_node.links.frames import ErrorCode

# Called by name: a card's actor method (``pod.call("execute", ...)``), click (help),
# gRPC (servicer methods, interceptor) and prometheus_client (a collector).
Card.execute
DeviceControl.record_wall  # pod.call("record_wall", ...): a wall-clock trace
DeviceControl.wall_spans
LazyGroup.format_commands
ControlService.ListPartitions
ControlService.GetPartition
ControlService.ListDevices
ControlService.ListLinks
ControlService.GetTopology
ControlService.StreamBenchmark
ControlService.KillCard
ControlService.DegradeLink
ControlService.CutLink
ControlService.HealLink
ControlService.ListFaults
Authenticator.intercept_service
PodCollector.collect

# Enum members made from text (``--op max``, ``--group orthogonal``, a device's state).
ReduceOp.MAX
ReduceOp.MIN
CommGroupType.ORTHOGONAL
HealthState.UNREACHABLE
Status.CANCELLED  # the status a call ended with, by its gRPC name (the client's refusals)
Status.UNKNOWN
Status.ABORTED
Status.OUT_OF_RANGE
Status.INTERNAL
Status.DATA_LOSS

# Record fields read by name (a TypedDict's keys, efficiencies by layer kind) or kept as
# facts with their source (docs/hardware.md) though no computation reads them yet.
Case.target_seconds  # type: ignore[attr-defined]  # a TypedDict: its keys are read as case["..."]
Case.target_bytes  # type: ignore[attr-defined]
Efficiencies.embedding
IpuM2000.ipu_link_ports


def _record_fields(processor: Processor, step: PublishedStep) -> None:
    """Fields without a default: named on instances."""
    processor.ipu_link_ports
    processor.ipu_link_total_Bps
    processor.host_interface
    step.logged_global_batch


_record_fields

# RFC 9113's error codes, kept as the RFC lists them; hpack's encoder reads this property.
ErrorCode.INTERNAL_ERROR
Encoder.header_table_size

# logging calls a rotating handler's _open by name when it opens or rotates its file.
_PrivateRotatingFile._open

# The PopTorch-shaped API's setters a user calls (docs/torch-training.md).
Options.allreduceAlgorithm
Options.rayAddress
