"""What the shared POD's servicer needs of the control servicer it stands in front of.

:class:`cluster.service.control_server.ControlService` is one; the sharing layer names it
through this protocol (the server module imports the sharing layer, not the reverse).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from cluster.model.topology import Topology
from cluster.service.partitions import PartitionTable
from ipupod_proto import control_pb2

Context = Any  # grpc.ServicerContext (grpc has no type information)


class Control(Protocol):
    """The control API of one POD, without users: its partitions and every call."""

    topology: Topology
    partitions: PartitionTable

    def card_ipus(self, card: str) -> list[int]: ...

    def GetStatus(self, request: control_pb2.StatusRequest,
                  context: Context) -> control_pb2.Status: ...

    def CreatePartition(self, request: control_pb2.CreatePartitionRequest,
                        context: Context) -> control_pb2.Partition: ...

    def ListPartitions(self, request: control_pb2.ListPartitionsRequest,
                       context: Context) -> control_pb2.PartitionList: ...

    def GetPartition(self, request: control_pb2.PartitionRef,
                     context: Context) -> control_pb2.Partition: ...

    def RemovePartition(self, request: control_pb2.PartitionRef,
                        context: Context) -> control_pb2.Partition: ...

    def ListDevices(self, request: control_pb2.ListDevicesRequest,
                    context: Context) -> control_pb2.DeviceList: ...

    def ListLinks(self, request: control_pb2.ListLinksRequest,
                  context: Context) -> control_pb2.LinkList: ...

    def GetTopology(self, request: control_pb2.TopologyRequest,
                    context: Context) -> control_pb2.TopologySummary: ...

    def RunBenchmark(self, request: control_pb2.BenchmarkRequest,
                     context: Context) -> control_pb2.BenchmarkResult: ...

    def StreamBenchmark(self, request: control_pb2.BenchmarkRequest,
                        context: Context) -> Iterator[control_pb2.BenchmarkResult]: ...

    def KillCard(self, request: control_pb2.KillCardRequest,
                 context: Context) -> control_pb2.FaultState: ...

    def DegradeLink(self, request: control_pb2.DegradeLinkRequest,
                    context: Context) -> control_pb2.FaultState: ...

    def CutLink(self, request: control_pb2.LinkRef,
                context: Context) -> control_pb2.FaultState: ...

    def HealLink(self, request: control_pb2.LinkRef,
                 context: Context) -> control_pb2.FaultState: ...

    def ListFaults(self, request: control_pb2.ListFaultsRequest,
                   context: Context) -> control_pb2.FaultState: ...
