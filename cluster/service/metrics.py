"""Prometheus metrics of a POD service, on one HTTP endpoint (``/metrics``).

The devices' figures reach the endpoint without a port per actor: at scrape time the
:class:`PodCollector` asks every device for its counters (one round trip) and reports them.
Collective figures are recorded by the service as it runs them. Names follow Prometheus
conventions: one prefix (``ipupod_``), base units, ``_bytes``, ``_seconds``, ``_total``;
labels stay bounded (IPUs, links and partitions of one POD; never tensors or requests).
Simulated seconds say so in their names (``sim_``); wall seconds say ``wall_``.
"""

from __future__ import annotations

import platform
from importlib.metadata import version

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gcl.modes import Mode
from ipu_node.answers import DeviceStats, IpuCounters, IpuMemoryStats, zero_counters

# Collective durations span microseconds (small simulated allreduces) to seconds.
DURATION_BUCKETS_SECONDS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                      2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MAX_LINK_SERIES = 4096  # per-link series up to this many directed links, else per type
FAULT_KINDS = ("card_killed", "link_degraded", "link_cut")  # ipu_node.faults counts them


class PodCollector:
    """Per-IPU, per-link and partition figures, read from the devices at scrape time."""

    def __init__(self, pod, partitions) -> None:
        self.pod, self.partitions = pod, partitions

    def collect(self):
        stats: list[DeviceStats]
        try:
            stats = self.pod.stats(deadline_seconds=10)
        except Exception:  # noqa: BLE001 - a scrape must not fail: report what is known
            stats = []
        memory: dict[int, IpuMemoryStats] = {}
        counters: dict[int, IpuCounters] = {}
        link_bytes = None
        for device in stats:
            memory.update(device["memory"])
            counters.update(device["counters"])
            link_bytes = (device["link_bytes"] if link_bytes is None
                          else link_bytes + device["link_bytes"])
        yield from self._ipus(memory, counters)
        yield from self._links(link_bytes)
        dropped = CounterMetricFamily(
            "ipupod_link_dropped_chunks", "Chunks a device dropped: their collective was not "
            "running within the link's deadline.", labels=["device"])
        for device in stats:
            dropped.add_metric([device["name"]], device["dropped_chunks"])
        yield dropped
        yield from self._partitions()
        yield from self._faults()

    def _ipus(self, memory: dict[int, IpuMemoryStats], counters: dict[int, IpuCounters]):
        """Memory, health, supersteps and busy time of every IPU, from the devices' answers
        (an IPU whose device did not answer reports 0 and unhealthy); labelled with its
        card or machine, server, and the Ray node it runs on (short id and address)."""
        topo, pod = self.pod.topology, self.pod
        labels = ["ipu", "unit", "server", "node", "node_ip"]
        used = GaugeMetricFamily("ipupod_ipu_memory_used_bytes",
                                 "In-Processor-Memory in use (bytes).", labels=labels)
        capacity = GaugeMetricFamily("ipupod_ipu_memory_capacity_bytes",
                                     "In-Processor-Memory capacity (bytes).", labels=labels)
        health = GaugeMetricFamily("ipupod_ipu_health", "1 if the IPU's device answers.",
                                   labels=labels)
        supersteps = CounterMetricFamily("ipupod_ipu_supersteps",
                                         "BSP supersteps the IPU took part in.", labels=labels)
        busy = CounterMetricFamily("ipupod_ipu_sim_busy_seconds",
                                   "Simulated seconds the IPU spent in collectives.",
                                   labels=labels)
        for ipu in range(topo.ipu_count):
            spec = pod.specs[pod.owner[ipu]]
            values = [topo.ipu_name(ipu), spec.name, spec.server, *pod.node_of(pod.owner[ipu])]
            held, count = memory.get(ipu), counters.get(ipu, zero_counters())
            used.add_metric(values, held["used_bytes"] if held else 0)
            capacity.add_metric(values, int(topo.ipu_memory_bytes[ipu]))
            health.add_metric(values, 1 if held is not None else 0)
            supersteps.add_metric(values, count["supersteps"])
            busy.add_metric(values, count["sim_seconds"])
        yield from (used, capacity, health, supersteps, busy)

    def _partitions(self):
        """The partitions defined, the POD's IPUs and each partition's size."""
        table = self.partitions.list()
        yield GaugeMetricFamily("ipupod_partitions", "Partitions defined.", value=len(table))
        yield GaugeMetricFamily("ipupod_ipus", "IPUs of the POD.",
                                value=self.pod.topology.ipu_count)
        sizes = GaugeMetricFamily("ipupod_partition_ipus", "IPUs per partition.",
                                  labels=["partition"])
        for partition in table:
            sizes.add_metric([partition.name], partition.size)
        yield sizes

    def _faults(self):
        """Restarts per unit and injected faults per kind, as the POD counted them."""
        pod = self.pod
        restarts = CounterMetricFamily("ipupod_actor_restarts",
                                       "Device actors restarted by Ray.", labels=["unit"])
        for spec, count in zip(pod.specs, pod.restarts):
            restarts.add_metric([spec.name], count)
        faults = CounterMetricFamily("ipupod_faults", "Faults injected.", labels=["kind"])
        for kind in FAULT_KINDS:
            faults.add_metric([kind], pod.fault_counts.get(kind, 0))
        yield from (restarts, faults)

    def _links(self, link_bytes):
        topo = self.pod.topology
        directed = 2 * topo.link_count_physical
        labels = ["link_type", "source", "target"]
        carried = CounterMetricFamily("ipupod_link_bytes", "Bytes carried by a directed link.",
                                      labels=labels)
        busy = CounterMetricFamily("ipupod_link_sim_busy_seconds",
                                   "Simulated seconds a directed link was busy (bytes over "
                                   "bandwidth): its rate is the link's utilisation.",
                                   labels=labels)
        bandwidth = GaugeMetricFamily("ipupod_link_bandwidth_bytes_per_second",
                                      "Bandwidth of a directed link (bytes per second).",
                                      labels=labels)
        per_link = directed <= MAX_LINK_SERIES
        totals: dict[tuple[str, str, str], list[float]] = {}
        for link in range(directed):
            kind = topo.link_types[topo.directed_type[link]].name
            key = ((kind, topo.node_names[topo.directed_src[link]],
                    topo.node_names[topo.directed_dst[link]]) if per_link else (kind, "all", "all"))
            nbytes = float(link_bytes[link]) if link_bytes is not None else 0.0
            rate = float(topo.directed_bandwidth_Bps[link])
            entry = totals.setdefault(key, [0.0, 0.0, 0.0])
            entry[0] += nbytes
            entry[1] += nbytes / rate
            entry[2] += rate
        for key, (nbytes, seconds, rate) in totals.items():
            carried.add_metric(list(key), nbytes)
            busy.add_metric(list(key), seconds)
            bandwidth.add_metric(list(key), rate)
        yield from (carried, busy, bandwidth)


class ServiceMetrics:
    """The service's registry: the device collector plus collective figures and build info.

    Collectives are labelled by ``collective`` (allreduce, ...), ``op`` (the reduction),
    ``mode`` (phantom or real), ``algorithm`` and ``partition``. Wall times are apart: a
    real collective's on the devices, a phantom one's costing in the service."""

    def __init__(self, pod, partitions) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(PodCollector(pod, partitions))
        names = ["collective", "op", "mode", "algorithm", "partition"]
        self.runs = Counter("ipupod_collective_runs", "Collectives run.", names,
                            registry=self.registry)
        self.bytes = Counter("ipupod_collective_bytes", "Bytes per replica of the collectives "
                             "run (nccl-tests' size).", names, registry=self.registry)
        self.sim = Histogram("ipupod_collective_sim_duration_seconds",
                             "Simulated duration of a collective on the emulated hardware.",
                             names, buckets=DURATION_BUCKETS_SECONDS, registry=self.registry)
        walls = ["collective", "op", "algorithm", "partition"]
        self.wall = Histogram("ipupod_collective_wall_duration_seconds",
                              "Wall-clock duration of a real-mode collective on the devices.",
                              walls, buckets=DURATION_BUCKETS_SECONDS, registry=self.registry)
        self.phantom_wall = Histogram(
            "ipupod_collective_phantom_wall_duration_seconds",
            "Wall-clock seconds the service took to cost a phantom-mode collective.", walls,
            buckets=DURATION_BUCKETS_SECONDS, registry=self.registry)
        info = Info("ipupod_build", "The service's version and Python.", registry=self.registry)
        info.info({"version": version("ipupod"), "python": platform.python_version()})

    def observe(self, row, partition: str, mode: Mode) -> None:
        """Record one benchmark row (a collective of one size) run in ``mode``."""
        labels = (row.collective, row.op, mode, row.algorithm, partition)
        self.runs.labels(*labels).inc()
        self.bytes.labels(*labels).inc(row.bytes)
        self.sim.labels(*labels).observe(row.sim_seconds)
        wall = self.wall if mode == Mode.REAL else self.phantom_wall
        wall.labels(row.collective, row.op, row.algorithm, partition).observe(row.wall_seconds)

    def serve(self, host: str, port: int):
        """Start the HTTP endpoint; return (server, bound port)."""
        server, _ = start_http_server(port, addr=host, registry=self.registry)
        return server, server.server_port
