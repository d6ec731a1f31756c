"""The timeline of a phantom bench sweep (``ipupod bench --trace FILE``), on simulated time.

Sizes run one after another on the time axis, each a span of process ``sweep`` (track
``sizes``) over its phases (track ``phases``: a span per phase, its supersteps' bytes,
seconds and the algorithm in ``args``). Process ``links`` has a track per link type with
a span for each phase whose traffic crosses links of that type (the bytes it carries
there), and counters of the GB/s each type carries and of its utilisation (that over the
bandwidth of all its links, both directions: 0 to 1). Then, by ``detail``:

- ``full``: a process per IPU-M2000 or card, a track per IPU, a span per phase the IPU
  sends or receives in (the bytes it sends per superstep);
- ``servers``: a process per server (rack at POD scale) with one track, the phases any of
  its IPUs take part in (their bytes summed, how many IPUs);
- ``link-types``: the link tracks only.

``auto`` picks ``full`` up to :data:`MAX_TRACKS` IPUs, else ``servers`` up to that many
servers, else ``link-types``, and the trace's metadata says what was aggregated. A long
sweep stops adding IPU or server spans at :data:`MAX_SPANS` (the metadata says from
where): the sweep's and links' tracks still hold every size.
"""

from __future__ import annotations

import numpy as np

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.trace import Trace
from cluster.model.units import format_size, plural
from gcl.phantom import PhaseTiming, Timing
from gcl.schedule import Phase, Schedule

AUTO, FULL, SERVERS, LINK_TYPES = "auto", "full", "servers", "link-types"
DETAILS = (AUTO, FULL, SERVERS, LINK_TYPES)
MAX_TRACKS = 4096  # IPU (full) or server (servers) tracks a trace holds at most
MAX_SPANS = 300_000  # spans on IPU or server tracks at most (about 45 MB of JSON)
SWEEP, LINKS = "sweep", "links"  # process names
OUTSIDE = "IPUs in no machine"  # the process of IPUs no unit or server holds (YAML files)
GB = 1e9


def resolve_detail(detail: str, topology: Topology) -> str:
    """The detail a trace of ``topology`` gets when ``detail`` is asked: ``auto`` as the
    module says; ``full`` or ``servers`` above :data:`MAX_TRACKS` tracks is refused."""
    tracks = {FULL: (topology.ipu_count, "IPU"), SERVERS: (len(topology.servers), "server")}
    if detail == AUTO:
        return next((level for level, (count, _) in tracks.items() if count <= MAX_TRACKS),
                    LINK_TYPES)
    if detail in tracks and tracks[detail][0] > MAX_TRACKS:
        count, what = tracks[detail]
        raise UserError(f"--trace-detail {detail} draws a track per {what}: "
                        f"{topology.name} has {count:,}, above the {MAX_TRACKS:,} a trace "
                        "holds; use --trace-detail servers or link-types (or auto)")
    if detail not in DETAILS:
        raise UserError(f"--trace-detail takes one of {', '.join(DETAILS)}, not {detail!r}")
    return detail


def _aggregation_note(detail: str, topology: Topology) -> str:
    """What the trace's metadata says about aggregation at ``detail``."""
    if detail == FULL:
        return "none: a track per IPU"
    ipus = plural(topology.ipu_count, "IPU")
    if detail == SERVERS:
        return (f"a track per server ({plural(len(topology.servers), 'server')}) instead of "
                f"one per IPU ({ipus})")
    return f"link types only: no track per IPU ({ipus}) or server"


class SweepTrace:
    """Collects the spans of a sweep size by size (:meth:`add`, as each is costed); the
    spans of size ``k`` start where size ``k - 1``'s end."""

    def __init__(self, topology: Topology, detail: str = AUTO) -> None:
        self.topology = topology
        self.detail = resolve_detail(detail, topology)
        self.trace = Trace(metadata={
            "tool": "ipupod bench", "topology": topology.name, "ipus": topology.ipu_count,
            "detail": self.detail, "aggregation": _aggregation_note(self.detail, topology),
            "max_tracks": MAX_TRACKS})
        self.clock_seconds = 0.0
        self._ipu_spans_added = 0
        self._link_types = [link.name for link in topology.link_types]
        capacity = np.bincount(topology.directed_type, weights=topology.directed_bandwidth_Bps,
                               minlength=len(self._link_types))
        self._capacity_Bps = dict(zip(self._link_types, capacity.tolist()))
        self._ipu_process = [OUTSIDE] * topology.ipu_count  # full: each IPU's process
        self._server = np.full(topology.ipu_count, len(topology.servers))  # servers: its track
        self._servers = [self._process(s.name, s.kind) for s in topology.servers] + [OUTSIDE]
        for unit in topology.units:
            for ipu in unit.ipus:
                self._ipu_process[ipu] = self._process(unit.name, unit.kind)
                self._server[ipu] = unit.server
        self._declare_tracks()

    def _declare_tracks(self) -> None:
        """Every track, in the order shown: the sweep's, the links', the IPUs' or servers'
        (IPUs in no machine or server: process :data:`OUTSIDE`, last)."""
        self.trace.track(SWEEP, "sizes")
        self.trace.track(SWEEP, "phases")
        for name in self._link_types:
            self.trace.track(LINKS, name)
        if self.detail == FULL:
            order = sorted(range(self.topology.ipu_count),
                           key=lambda ipu: self._ipu_process[ipu] == OUTSIDE)
            for ipu in order:
                self.trace.track(self._ipu_process[ipu], self.topology.ipu_name(ipu))
        elif self.detail == SERVERS:
            for index in np.unique(self._server).tolist():
                self.trace.track(self._servers[index], "IPUs")

    @staticmethod
    def _process(name: str, kind: str) -> str:
        """The process name of an IPU-M2000, card or server."""
        return f"{name} ({kind})"

    def add(self, schedule: Schedule, timing: Timing) -> None:
        """The spans of one size: its span, a span per phase on every track it uses."""
        start = self.clock_seconds
        nbytes = schedule.count * schedule.itemsize
        self.trace.span(SWEEP, "sizes", f"{schedule.collective} {format_size(nbytes)}",
                        start, timing.sim_seconds, collective=str(schedule.collective),
                        algorithm=schedule.algorithm, bytes=nbytes, dtype=str(schedule.dtype),
                        group_size=schedule.group_size, groups=len(schedule.groups),
                        supersteps=schedule.supersteps)
        at = start
        for phase, costed in zip(schedule.phases, timing.phases):
            self._phase(schedule, phase, costed, at)
            at += costed.seconds
        for counter in ("GB/s carried", "utilisation"):
            self.trace.counter(LINKS, counter, at, **dict.fromkeys(self._link_types, 0.0))
        self.clock_seconds = start + timing.sim_seconds

    def _phase(self, schedule: Schedule, phase: Phase, costed: PhaseTiming,
               at: float) -> None:
        """One phase's spans, starting at ``at`` seconds."""
        step_bytes = int(phase.count.sum()) * schedule.itemsize
        self.trace.span(SWEEP, "phases", phase.label, at, costed.seconds,
                        algorithm=schedule.algorithm, scope=phase.scope, steps=phase.steps,
                        step_seconds=costed.step_seconds, sync_seconds=costed.sync_seconds,
                        exchange_seconds=costed.exchange_seconds,
                        reduce_seconds=costed.reduce_seconds, bytes_per_step=step_bytes,
                        flows=len(phase.src), reduce=phase.reduce)
        rates = {}
        for name in self._link_types:
            carried = costed.step_link_type_bytes.get(name, 0.0) * phase.steps
            rates[name] = carried / costed.seconds / GB if costed.seconds > 0 else 0.0
            if carried > 0:
                self.trace.span(LINKS, name, phase.label, at, costed.seconds,
                                algorithm=schedule.algorithm, bytes=carried,
                                GBps=rates[name])
        self.trace.counter(LINKS, "GB/s carried", at, **rates)
        self.trace.counter(LINKS, "utilisation", at, **{
            name: rate * GB / self._capacity_Bps[name] if self._capacity_Bps[name] else 0.0
            for name, rate in rates.items()})
        if self.detail in (FULL, SERVERS):
            self._ipu_spans(schedule, phase, costed, at)

    def _ipu_spans(self, schedule: Schedule, phase: Phase, costed: PhaseTiming,
                   at: float) -> None:
        """A phase's spans on the IPUs (``full``) or servers (``servers``) taking part."""
        n = self.topology.ipu_count
        taking_part = (np.bincount(phase.src, minlength=n)
                       + np.bincount(phase.dst, minlength=n)) > 0
        ipus = np.flatnonzero(taking_part)
        spans = len(ipus) if self.detail == FULL else len(np.unique(self._server[ipus]))
        if "truncated" in self.trace.metadata or self._ipu_spans_added + spans > MAX_SPANS:
            self.trace.metadata.setdefault("truncated", (
                f"IPU and server tracks stop at {at * 1e6:.3f} us (phase {phase.label!r}): "
                f"more than {MAX_SPANS:,} spans; the sweep and links tracks go on"))
            return
        self._ipu_spans_added += spans
        sent = np.bincount(phase.src, weights=phase.count, minlength=n) * schedule.itemsize
        if self.detail == FULL:
            for ipu in ipus.tolist():
                self.trace.span(self._ipu_process[ipu], self.topology.ipu_name(ipu),
                                phase.label, at, costed.seconds,
                                bytes_sent_per_step=int(sent[ipu]))
            return
        counts = np.bincount(self._server[ipus], minlength=len(self._servers))
        sums = np.bincount(self._server[ipus], weights=sent[ipus],
                           minlength=len(self._servers))
        for index in np.flatnonzero(counts).tolist():
            self.trace.span(self._servers[index], "IPUs", phase.label, at, costed.seconds,
                            ipus=int(counts[index]), bytes_sent_per_step=int(sums[index]))
