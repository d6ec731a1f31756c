"""The application side, in the shape PopART users know.

    from cluster.service.device_manager import DeviceManager

    device = DeviceManager().acquireAvailableDevice(numIpus=8)
    result = device.bench(CollectiveName.ALLREDUCE, min_bytes=1 << 20)
    device.detach()

``acquireAvailableDevice`` returns a partition of a running ``ipupod serve``: the one
named by ``IPUOF_VIPU_API_PARTITION_ID`` if set (as V-IPU applications do), else a new one
it creates (and removes again on ``detach``). The service is found like every client
(``IPUOF_VIPU_API_HOST`` / ``IPUOF_VIPU_API_PORT``, the token file).
"""

from __future__ import annotations

import itertools
import os

from cluster.errors import UserError
from cluster.service.client import Client
from gcl.collectives import CollectiveName, DType, ReduceOp
from gcl.modes import Mode
from ipupod_proto import control_pb2

_names = itertools.count()


class Device:
    """An acquired partition: its IPUs, on which the service runs collectives."""

    def __init__(self, client: Client, partition: control_pb2.Partition, owned: bool) -> None:
        self._client, self._owned, self._attached = client, owned, True
        self.id = partition.name
        self.ipus = list(partition.ipus)
        self.numIpus = partition.size

    def bench(self, collective: CollectiveName = CollectiveName.ALLREDUCE, *,
              min_bytes: int = 1 << 20, max_bytes: int = 0, factor: float = 2.0,
              algorithm: str = "auto", dtype: DType = DType.FLOAT32, op: ReduceOp = ReduceOp.SUM,
              mode: Mode = Mode.PHANTOM,
              group: str = "all", root: int = 0, iterations: int = 1, warmup: int = 0,
              check: bool = True) -> control_pb2.BenchmarkResult:
        """Run a collective benchmark on this device's IPUs (simulated time per size; in
        real mode ``iterations`` timed runs after ``warmup`` ones per size and placement,
        results checked unless ``check`` is off)."""
        if not self._attached:
            raise UserError(f"device {self.id} is detached: acquire a device again")
        return self._client.run_benchmark(control_pb2.BenchmarkRequest(
            partition=self.id, collective=collective, min_bytes=min_bytes,
            max_bytes=max_bytes, factor=factor, algorithm=algorithm, dtype=dtype, op=op,
            mode=mode, group=group, root=root, iterations=iterations, warmup=warmup,
            check=check))

    def detach(self) -> None:
        """Give the device back (its partition is removed if this process created it)."""
        if self._attached and self._owned:
            self._client.remove_partition(self.id)
        self._attached = False

    def __enter__(self) -> Device:
        """The device, for a ``with`` block that detaches it at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Detach on leaving a ``with`` block."""
        self.detach()


class DeviceManager:
    """Finds the service and hands out devices (partitions)."""

    def __init__(self, host: str | None = None, port: int | None = None,
                 token_file: str | None = None) -> None:
        self._client = Client(host, port, token_file)

    def acquireAvailableDevice(self, numIpus: int = 1) -> Device:
        """The partition ``IPUOF_VIPU_API_PARTITION_ID`` names (it must have ``numIpus``
        IPUs), or a new partition of ``numIpus`` IPUs."""
        named = os.environ.get("IPUOF_VIPU_API_PARTITION_ID")
        if named:
            partition = self._client.get_partition(named)
            if partition.size != numIpus:
                raise UserError(f"partition {named} (IPUOF_VIPU_API_PARTITION_ID) has "
                                f"{partition.size} IPUs, not the {numIpus} asked for")
            return Device(self._client, partition, owned=False)
        name = f"popart-{os.getpid()}-{next(_names)}"
        partition = self._client.create_partition(name, numIpus, gcds=1)
        return Device(self._client, partition, owned=True)
