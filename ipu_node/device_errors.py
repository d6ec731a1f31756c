"""Errors of the emulated devices: what failed, and which card, machine or link."""

from __future__ import annotations

from cluster.errors import IpupodError, UserError


class DeviceError(IpupodError, RuntimeError):
    """An emulated device or link failed (died, timed out, refused): the message names it."""


class LinkTimeout(DeviceError):
    """Data did not arrive over an emulated link before its deadline."""


class OutOfMemory(UserError):
    """A tensor does not fit in an IPU's free In-Processor-Memory."""


class DeviceRestarting(DeviceError):
    """A device died and Ray is restarting it: the call can be tried again shortly."""


class DeviceDied(DeviceError):
    """A device's actor died while it ran its part of a collective."""


class NodeLost(DeviceError):
    """The Ray node a device runs on is gone: the message names the node and its devices,
    which answer again only once Ray places them anew (on a node with room, or on the
    node when it returns)."""
