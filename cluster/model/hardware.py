"""The hardware catalogue: every processor, card, machine, server and link of an IPU-POD.

Every number comes from ``docs/hardware.md``; the numbers in brackets name the source
document it was read from (``000`` .. ``004``, listed by title there: the *seed*
documents) or say *public docs* (Graphcore's public documentation and datasheets). Where
two sources disagree the seed's figure is the default and the other can be chosen with
:class:`FigureChoice` (``--figures public`` on the command line). Latencies are not in
any source: they are this project's assumptions, stated below with their reasoning, and
every preset lets them be overridden.

Units are in the names: ``_bytes``, ``_Bps`` (bytes per second, per direction unless the
name says ``bidirectional``), ``_seconds``, ``_flops_per_second`` (floating-point
operations per second).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, get_args

from cluster.errors import SpecError, UserError
from cluster.model.text_enum import TextEnum
from cluster.model.units import GB, MB, Gbps, KiB


class DeviceKind(TextEnum):
    """The hardware one emulator actor stands for (a topology's unit): a C2 PCIe card of
    two IPUs in a server, or an IPU-M2000 machine of four in a rack. A YAML file may name
    other kinds; they compare unequal to both."""

    C2 = "C2"
    IPU_M2000 = "IPU-M2000"


FigureSource = Literal["seed", "public"]
FIGURE_SOURCES: tuple[str, ...] = get_args(FigureSource)  # what ``--figures`` takes


@dataclass(frozen=True)
class FigureChoice:
    """Which source to take where the seeds and the public docs disagree.

    - ``c2_card_to_card``: 256 GB/s bidirectional between C2 cards (seed 000/001) or
      128 GB/s (public docs).
    - ``gc2_flops``: 100 TFLOPS per GC2 from 1.6 PFLOPS per 16 IPUs (seed 000) or
      124.5 TFLOPS fp16 peak (public docs).
    - ``m2000_streaming_memory``: 450 GB exchange memory per M2000 less its 3.6 GB of
      In-Processor-Memory (seed 002) or the 128 GB standard configuration (public docs).
    """

    c2_card_to_card: FigureSource = "seed"
    gc2_flops: FigureSource = "seed"
    m2000_streaming_memory: FigureSource = "seed"

    @classmethod
    def all_from(cls, source: str) -> FigureChoice:
        """Take every disputed figure from one source (``seed`` or ``public``)."""
        if source not in ("seed", "public"):
            raise UserError(f"unknown figure source {source!r}: choose 'seed' or 'public'")
        figure: FigureSource = "seed" if source == "seed" else "public"
        return cls(figure, figure, figure)


SEED_FIGURES = FigureChoice()


@dataclass(frozen=True)
class Processor:
    """One IPU: its memory, its compute, its host and IPU-Link interfaces."""

    name: str
    tiles: int
    threads_per_tile: int
    in_processor_memory_bytes: int
    memory_bandwidth_Bps: float
    fp16_flops_per_second: float
    fp32_flops_per_second: float
    ipu_link_ports: int
    ipu_link_total_Bps: float  # chip-to-chip IPU-Link bandwidth, all ports, per direction
    host_interface: str

    @property
    def threads(self) -> int:
        """Hardware threads on the whole IPU (tiles times threads per tile)."""
        return self.tiles * self.threads_per_tile


def gc2(figures: FigureChoice = SEED_FIGURES) -> Processor:
    """GC2 "Colossus" (Mk1) IPU.

    1216 tiles of 6 threads (7296 threads), 256 kB In-Processor-Memory per tile (~300 MB
    per IPU), 45 TB/s memory bandwidth, 10 IPU-Link ports of 160 Gbps per direction
    (000, 001). Compute: 100 TFLOPS mixed precision, from 1.6 PFLOPS per 16-IPU DSS 8440
    (000); public docs: 124.5 TFLOPS fp16 and 31.1 TFLOPS fp32 peak.
    """
    fp16 = 100e12 if figures.gc2_flops == "seed" else 124.5e12
    return Processor(
        name="GC2",
        tiles=1216,
        threads_per_tile=6,
        in_processor_memory_bytes=1216 * 256 * KiB,
        memory_bandwidth_Bps=45e12,
        fp16_flops_per_second=fp16,
        fp32_flops_per_second=31.1e12,
        ipu_link_ports=10,
        ipu_link_total_Bps=10 * 160 * Gbps,
        host_interface="PCIe Gen3/4 x16",
    )


def gc200() -> Processor:
    """GC200 (Mk2) IPU.

    1472 tiles of 6 threads (8832 threads), 900 MB In-Processor-Memory, 47.5 TB/s memory
    bandwidth, 10 IPU-Links with 320 GB/s chip-to-chip, PCIe Gen4 x16 to the host (003, 002).
    Compute: 250 TFLOPS fp16, a quarter of the IPU-M2000's 1 PFLOPS (002); fp32 62.5 TFLOPS
    (public docs).
    """
    return Processor(
        name="GC200",
        tiles=1472,
        threads_per_tile=6,
        in_processor_memory_bytes=900 * MB,
        memory_bandwidth_Bps=47.5e12,
        fp16_flops_per_second=250e12,
        fp32_flops_per_second=62.5e12,
        ipu_link_ports=10,
        ipu_link_total_Bps=320 * GB,
        host_interface="PCIe Gen4 x16",
    )


@dataclass(frozen=True)
class LinkType:
    """A kind of link: its bandwidth per direction and the latency of one traversal.

    ``bandwidth_Bps`` is per direction: a link carries that much each way at once.
    """

    name: str
    bandwidth_Bps: float
    latency_seconds: float
    source: str

    def with_overrides(
        self, bandwidth_Bps: float | None = None, latency_seconds: float | None = None
    ) -> LinkType:
        """A copy with a different bandwidth or latency (both must be positive)."""
        bandwidth = self.bandwidth_Bps if bandwidth_Bps is None else bandwidth_Bps
        latency = self.latency_seconds if latency_seconds is None else latency_seconds
        if not 0 < bandwidth < float("inf"):
            raise UserError(f"link type {self.name}: bandwidth must be positive and finite, "
                            f"got {bandwidth}")
        if not latency >= 0:
            raise UserError(f"link type {self.name}: latency must be 0 or more, got {latency}")
        return replace(self, bandwidth_Bps=bandwidth, latency_seconds=latency)


# Latency assumptions (no source gives them). IPU-Links are short chip-to-chip SerDes links
# with no switch: a few hundred nanoseconds. A PCIe hop through a switch costs roughly a
# microsecond round the endpoint and switch. A 100 Gbps InfiniBand or Ethernet hop with its
# adapter is of the order of a microsecond; RoCE to the host a little more.
IPU_LINK_LATENCY_SECONDS = 300e-9
PCIE_LATENCY_SECONDS = 1e-6
INFINIBAND_LATENCY_SECONDS = 1e-6
GW_LINK_LATENCY_SECONDS = 1e-6
ROCE_LATENCY_SECONDS = 1.5e-6

# Sync (BSP barrier) cost per superstep: within one IPU-Link domain the Sync-Links make it
# sub-microsecond; across hosts or GW-Links the barrier crosses the network. Assumptions.
LOCAL_SYNC_SECONDS = 0.5e-6
GLOBAL_SYNC_SECONDS = 5e-6


def c2_rung() -> LinkType:
    """The IPU-Links joining the two IPUs of a C2 card: 192 GB/s (000, 001), taken as the
    bidirectional total, so 96 GB/s each way."""
    return LinkType("ipu-link-rung", 192 * GB / 2, IPU_LINK_LATENCY_SECONDS, "000, 001")


def c2_rail(figures: FigureChoice = SEED_FIGURES) -> LinkType:
    """One rail of the DSS 8440 ladder, IPU to IPU between neighbouring C2 cards.

    Cards are joined by 256 GB/s bidirectional (000, 001; public docs: 128 GB/s) over two
    rails, one per IPU pair: a quarter of the card-to-card total each way per rail.
    """
    total = 256 * GB if figures.c2_card_to_card == "seed" else 128 * GB
    source = "000, 001" if figures.c2_card_to_card == "seed" else "public docs"
    return LinkType("ipu-link-rail", total / 4, IPU_LINK_LATENCY_SECONDS, source)


def ipu_link_mk2() -> LinkType:
    """One Mk2 IPU-Link: 64 GB/s bidirectional (public docs), 32 GB/s each way; ten of them
    make the GC200's 320 GB/s chip to chip (003)."""
    return LinkType("ipu-link", 64 * GB / 2, IPU_LINK_LATENCY_SECONDS, "public docs, 003")


def pcie_gen3_x16() -> LinkType:
    """PCIe Gen3 x16: 8 GT/s x 16 lanes with 128b/130b coding, 15.75 GB/s each way (PCIe 3.0
    specification). The DSS 8440's switch fabric is Gen3 (000)."""
    return LinkType("pcie-gen3-x16", 8e9 * 16 * 128 / 130 / 8, PCIE_LATENCY_SECONDS,
                    "000, PCIe 3.0")


def pcie_gen4_x16() -> LinkType:
    """PCIe Gen4 x16: 64 GB/s bidirectional (003), 32 GB/s each way."""
    return LinkType("pcie-gen4-x16", 64 * GB / 2, PCIE_LATENCY_SECONDS, "003")


def infiniband_100g() -> LinkType:
    """One 100 Gbps InfiniBand adapter: 12.5 GB/s each way, 200 Gbps bidirectional (000)."""
    return LinkType("infiniband-100g", 100 * Gbps, INFINIBAND_LATENCY_SECONDS, "000, 001")


def gw_link_100g() -> LinkType:
    """One GW-Link port, 100 GbE: 12.5 GB/s each way (public docs, 004)."""
    return LinkType("gw-link-100g", 100 * Gbps, GW_LINK_LATENCY_SECONDS, "public docs, 004")


def host_roce_100g() -> LinkType:
    """The IPU-M2000's 100 GbE RoCEv2 NIC to its host: 12.5 GB/s each way (public docs)."""
    return LinkType("host-roce-100g", 100 * Gbps, ROCE_LATENCY_SECONDS, "public docs")


@dataclass(frozen=True)
class IpuM2000:
    """IPU-M2000: 1U blade of four GC200 IPUs, 1 PFLOPS, 5,888 cores (002, 003).

    Exchange Memory 450 GB (002) = 4 x 900 MB In-Processor-Memory plus Streaming Memory;
    public docs: 128 GB standard, up to 448 GB. Front panel (public docs): 8 IPU-Link ports,
    2 GW-Link ports (100 GbE), 8 Sync-Link ports, one 100 GbE RoCEv2 NIC to the host.
    """

    processor: Processor
    streaming_memory_bytes: int
    ipus: int = 4
    gw_link_ports: int = 2
    ipu_link_ports: int = 8


def ipu_m2000(figures: FigureChoice = SEED_FIGURES) -> IpuM2000:
    """An IPU-M2000 of four GC200s; its Streaming Memory (bytes) per ``figures``: 450 GB
    less the IPUs' In-Processor-Memory (002), or 128 GB (public docs)."""
    processor = gc200()
    if figures.m2000_streaming_memory == "seed":
        streaming = 450 * GB - 4 * processor.in_processor_memory_bytes
    else:
        streaming = 128 * GB
    return IpuM2000(processor=processor, streaming_memory_bytes=streaming)


@dataclass(frozen=True)
class Dss8440:
    """Dell DSS 8440 IPU server (000, 001): eight C2 cards (16 IPUs, 1.6 PFLOPS) on a PCIe
    Gen3 switch fabric of four switches, an IPU-Link ladder, and two 100 Gbps InfiniBand
    adapters for scale-out (the default configuration)."""

    cards: int = 8
    pcie_switches: int = 4
    infiniband_adapters: int = 2


POD_MIN_IPUS = 16
POD_MAX_IPUS = 65_536
IPUS_PER_POD64 = 64


def check_pod_size(ipus: int) -> None:
    """IPU-POD sizes are powers of two from 16 to 65,536 IPUs (003, public docs)."""
    if ipus < POD_MIN_IPUS or ipus > POD_MAX_IPUS or ipus & (ipus - 1):
        raise SpecError(
            f"an IPU-POD has a power-of-two number of IPUs from {POD_MIN_IPUS} to "
            f"{POD_MAX_IPUS:,} (pod16, pod64, pod128, ... pod65536); {ipus} is not one"
        )
