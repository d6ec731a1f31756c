"""Several devices of one server (or rack) in one Ray worker process, when asked.

By default every card or IPU-M2000 is a Ray actor of its own, a process each. A Ray
worker process costs about 0.4 CPU seconds to start and 78 MiB before it does anything
(``docs/benchmarks.md``), so a large POD on a small machine spends most of its launch
starting processes. With ``devices_per_process`` N > 1 the launcher starts one
:class:`DeviceProcess` actor per N devices of a server instead; each device in it is the
same :class:`~ipu_node.card.Card` or :class:`~ipu_node.host.HostRelay` object, with its
own store, counters and link server, and its peers still reach it over its links.

The driver keeps one handle per device either way
(:class:`~ipu_node.device_handle.DeviceHandle`): a :class:`MemberHandle` answers
``handle.method.remote(...)`` as an actor handle does, routing the call to the device
inside its process. What changes is what fails together: killing a device, or losing its
process, takes its process-mates down with it (as a server losing power would), and Ray
restarts them together.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, cast

import ray
from ray import ObjectRef
from ray.actor import ActorHandle

from cluster.model.topology import Topology
from ipu_node.card import Card
from ipu_node.control import CONTROL, DeviceControl
from ipu_node.device_errors import DeviceError
from ipu_node.device_handle import DeviceHandle
from ipu_node.device_spec import DeviceSpec
from ipu_node.host import HostRelay
from ipu_node.links.link_tls import LinkTLS


def device_class(spec: DeviceSpec) -> type[Card] | type[HostRelay]:
    """What emulates ``spec``: a card or machine (it has IPUs), else a server's host."""
    return Card if spec.ipus else HostRelay


class DeviceProcess:
    """Devices ``specs`` in one process (wrapped by ``ray.remote``); member ``i`` is
    ``specs[i]``."""

    def __init__(self, specs: Sequence[DeviceSpec], topology: Topology,
                 host: str = "127.0.0.1", link_secret: str | None = None,
                 link_tls: LinkTLS | None = None, link_shared_memory: bool = True) -> None:
        """As :class:`~ipu_node.card.Card`'s arguments, for each of ``specs``."""
        self.members: list[DeviceControl] = [
            device_class(spec)(spec, topology, host, link_secret, link_tls, link_shared_memory)
            for spec in specs]

    def call(self, member: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` of device ``member``, on the collective threads."""
        return self._bound(member, method)(*args, **kwargs)

    @ray.method(concurrency_group=CONTROL)
    def control(self, member: int, method: str, *args: Any, **kwargs: Any) -> Any:
        """The same for a control method, on the control threads (answered while
        collectives fill the others)."""
        return self._bound(member, method)(*args, **kwargs)

    def _bound(self, member: int, method: str) -> Callable[..., Any]:
        if not 0 <= member < len(self.members):
            raise DeviceError(f"this process holds {len(self.members)} devices, not {member + 1}")
        device = self.members[member]
        if method.startswith("_") or not callable(getattr(type(device), method, None)):
            raise DeviceError(f"device {device.spec.name} has no method {method!r}")
        bound: Callable[..., Any] = getattr(device, method)
        return bound


class MemberHandle(DeviceHandle):
    """The driver's handle on one device of a :class:`DeviceProcess`: each call goes to
    the process's control threads or its collective threads, as the device's method says."""

    def __init__(self, process: ActorHandle, member: int, kind: type[DeviceControl]) -> None:
        self.process, self.member, self.kind = process, member, kind

    def route(self, method: str) -> Callable[..., ObjectRef[Any]]:
        """What sends ``method(*args)`` to the device (``DeviceProcess.call`` or
        ``.control`` of its process), or AttributeError if its kind lacks it."""
        function = getattr(self.kind, method, None)
        if method.startswith("_") or not callable(function):
            raise AttributeError(f"{self.kind.__name__} has no method {method!r}")
        on_control = getattr(function, "__ray_concurrency_group__", None) == CONTROL
        target = self.process.control if on_control else self.process.call
        return functools.partial(target.remote, self.member, method)

    def __getattr__(self, method: str) -> NoReturn:
        """A method no device has (those it has are :class:`DeviceHandle`'s)."""
        if method.startswith("_"):
            raise AttributeError(method)
        raise AttributeError(f"{self.kind.__name__} has no method {method!r}")


def process_of(handle: DeviceHandle) -> ActorHandle:
    """The Ray actor that runs the device behind ``handle`` (itself, when alone)."""
    return handle.process if isinstance(handle, MemberHandle) else cast(ActorHandle, handle)


def process_mates(handles: Sequence[DeviceHandle], index: int) -> list[int]:
    """The devices that share device ``index``'s process, itself included."""
    process = process_of(handles[index])
    return [i for i, handle in enumerate(handles) if process_of(handle) is process]


def kill_device(handle: DeviceHandle, *, no_restart: bool = True) -> None:
    """Kill the process of the device behind ``handle`` (its process-mates with it)."""
    ray.kill(process_of(handle), no_restart=no_restart)
