"""The driver's handle on one emulated device: the calls it makes, typed as the device's
own methods.

A driver calls a device as Ray's actor handles do, ``handle.method.remote(*args)``, which
returns the ``ObjectRef`` of the answer. :class:`DeviceHandle` lists the methods a driver
calls (those of :class:`~ipu_node.control.DeviceControl` and :class:`~ipu_node.card.Card`),
each with the method's arguments and answer (:class:`RemoteMethod`; that they are the
method's is tested), so a wrong argument is a type error at the call. Two kinds of handle
implement it:

- a Ray actor handle of a device alone in its process (:func:`actor_device`): Ray answers
  these calls itself, and the handle stays what ``ray.kill`` and Ray's tools take;
- a :class:`~ipu_node.device_process.MemberHandle`, a device inside a
  :class:`~ipu_node.device_process.DeviceProcess`, which routes each call to its member.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, ParamSpec, Protocol, TypeVar, cast, overload

import numpy as np
from ray import ObjectRef
from ray.actor import ActorHandle

from cluster.model.link_faults import LinkFault
from gcl.collectives import ReduceOp
from gcl.schedule import Schedule
from ipu_node.answers import DeviceInfo, DeviceStats, RunAnswer
from ipu_node.ownership import Ownership
from ipu_node.wall_spans import RecordedSpans

P = ParamSpec("P")
R = TypeVar("R")
Faults = dict[int, LinkFault]
Ranks = dict[int, tuple[int, int]]  # IPU -> (group, rank)


class Routing(Protocol):
    """A handle that routes calls by name itself (not a Ray actor handle)."""

    def route(self, method: str) -> Callable[..., ObjectRef[Any]]:
        """What sends a call of ``method`` (its ``.remote``), or AttributeError."""
        ...


class RemoteCall(Generic[P, R]):
    """``handle.method`` of a routing handle: ``.remote(*args)`` sends the call."""

    def __init__(self, send: Callable[..., ObjectRef[Any]]) -> None:
        self._send = send

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ObjectRef[R]:
        return cast("ObjectRef[R]", self._send(*args, **kwargs))


class RemoteMethod(Generic[P, R]):
    """A device method as a driver calls it, ``handle.method.remote(*args)``: arguments
    ``P`` (each may be an ``ObjectRef`` of one, as Ray allows), answered with an
    ``ObjectRef`` of ``R``. On a routing handle it asks the handle to send the call."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, handle: None, owner: type) -> RemoteMethod[P, R]: ...

    @overload
    def __get__(self, handle: object, owner: type | None = None) -> RemoteCall[P, R]: ...

    def __get__(self, handle: object, owner: type | None = None) -> Any:
        if handle is None:
            return self
        return RemoteCall(cast(Routing, handle).route(self.name))


class DeviceHandle(Protocol):
    """What a driver calls on a device, with the device methods' arguments and answers
    (:class:`~ipu_node.control.DeviceControl`'s; ``put`` to ``execute`` are a
    :class:`~ipu_node.card.Card`'s only)."""

    info: ClassVar[RemoteMethod[[], DeviceInfo]] = RemoteMethod()
    connect: ClassVar[RemoteMethod[[list[str], list[str], int, Ownership, Faults | None, int],
                                   None]] = RemoteMethod()
    set_link_faults: ClassVar[RemoteMethod[[Faults, int], None]] = RemoteMethod()
    abort: ClassVar[RemoteMethod[[str, str], None]] = RemoteMethod()
    tensor_info: ClassVar[RemoteMethod[[str], dict[int, tuple[tuple[int, ...], str]]]] = \
        RemoteMethod()
    record_wall: ClassVar[RemoteMethod[[int], None]] = RemoteMethod()
    wall_spans: ClassVar[RemoteMethod[[], RecordedSpans]] = RemoteMethod()
    stats: ClassVar[RemoteMethod[[], DeviceStats]] = RemoteMethod()
    shutdown: ClassVar[RemoteMethod[[], None]] = RemoteMethod()
    put: ClassVar[RemoteMethod[[int, str, np.ndarray], None]] = RemoteMethod()
    get: ClassVar[RemoteMethod[[int, str], np.ndarray]] = RemoteMethod()
    free: ClassVar[RemoteMethod[[int, str], None]] = RemoteMethod()
    run: ClassVar[RemoteMethod[[Schedule | ObjectRef[Schedule], str, Ranks,
                                dict[int, np.ndarray] | str, str | None, ReduceOp, float,
                                float, Faults | None], RunAnswer]] = RemoteMethod()
    relayed: ClassVar[RemoteMethod[[str], np.ndarray]] = RemoteMethod()
    execute: ClassVar[RemoteMethod[..., Any]] = RemoteMethod()  # (task, *args): task's answer


def actor_device(actor: ActorHandle) -> DeviceHandle:
    """The handle on a device that is a Ray actor of its own (a
    :class:`~ipu_node.card.Card` or :class:`~ipu_node.host.HostRelay`): Ray's handle
    answers ``handle.method.remote(...)`` for each of the device's methods itself."""
    return cast(DeviceHandle, actor)
