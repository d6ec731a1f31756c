"""The timeline of a benchmark the service runs (``BenchmarkRequest.trace``; ``ipupod bench
--partition NAME --trace FILE``): built as the bench runs, as ``ipupod bench --trace``
builds it here (:class:`gcl.sweep_trace.SweepTrace`; in real mode with the devices' wall
clock, :class:`ipu_node.wall_trace.WallRecorder`), then sent after the rows in pieces of
at most :data:`TRACE_CHUNK_BYTES`. A trace above :data:`MAX_TRACE_BYTES` is refused
(RESOURCE_EXHAUSTED) once the rows are sent, saying how to make it smaller."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.trace import trace_json
from cluster.model.units import format_size
from cluster.service.partitions import RESOURCE_EXHAUSTED, PartitionError
from gcl.phantom import Timing
from gcl.schedule import Schedule
from gcl.sweep_trace import AUTO, DETAILS, SweepTrace
from ipu_node.pod import EmulatedPod
from ipu_node.wall_trace import WallRecorder
from ipupod_proto import control_pb2

MAX_TRACE_BYTES = 64 << 20  # a trace the service sends at most
TRACE_CHUNK_BYTES = 1 << 20  # each result's piece of it (gRPC's default limit is 4 MiB)


@dataclass
class BenchTrace:
    """One bench's timeline as it runs: the sizes' simulated spans, and in real mode what
    the devices did (:meth:`start` and :meth:`stop` around the runs)."""

    sweep: SweepTrace
    wall: WallRecorder | None = None
    partition: str = ""

    def add(self, schedule: Schedule, timing: Timing) -> None:
        """A size's simulated timing (``on_costed`` of the bench)."""
        self.sweep.add(schedule, timing)

    def start(self, pod: EmulatedPod) -> None:
        """Real mode: the devices record what they do from now on."""
        self.wall = WallRecorder()
        self.wall.start(pod)

    def stop(self, pod: EmulatedPod) -> None:
        """Real mode: take what the devices recorded."""
        if self.wall is not None:
            self.wall.stop(pod)

    def results(self, **fields: Any) -> Iterator[control_pb2.BenchmarkResult]:
        """The trace's pieces, each a result with ``fields`` and no rows."""
        trace = self.sweep.trace
        trace.metadata["partition"] = self.partition
        if self.wall is not None:
            self.wall.add_to(trace)
        data = trace_json(trace)
        if len(data) > MAX_TRACE_BYTES:
            raise PartitionError(RESOURCE_EXHAUSTED, (
                f"the trace is {format_size(len(data))}B, above the "
                f"{format_size(MAX_TRACE_BYTES)}B the service sends: ask for "
                "--trace-detail link-types (or servers), or fewer sizes"))
        for at in range(0, len(data), TRACE_CHUNK_BYTES):
            yield control_pb2.BenchmarkResult(trace_chunk=data[at:at + TRACE_CHUNK_BYTES],
                                              trace_bytes=len(data), **fields)


def bench_trace(request: control_pb2.BenchmarkRequest, topology: Topology,
                partition: str) -> BenchTrace | None:
    """What records the bench's timeline when ``request`` asks for one, else None; a
    detail it does not know, or one too fine for the POD, is a user error."""
    detail = request.trace_detail or AUTO
    if not request.trace:
        if request.trace_detail:
            raise UserError("trace_detail says how fine a trace is: set trace too")
        return None
    if detail not in DETAILS:
        raise UserError(f"trace_detail takes one of {', '.join(DETAILS)}, not {detail!r}")
    return BenchTrace(SweepTrace(topology, detail), partition=partition)
