"""``--allow-split-server`` and ``--devices-per-process``: where a real-mode command's
devices go on Ray, and how many share a process (``serve``, ``bench``, ``train``;
docs/real-mode.md). The command gets both as one :class:`Placement`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import click

Command = TypeVar("Command", bound=Callable[..., Any])
MAX_DEVICES_PER_PROCESS = 64  # a rack's 16 IPU-M2000s fit in one; more buys nothing


@dataclass(frozen=True)
class Placement:
    """How the devices are placed: ``EmulatedPod.launch(**placement.launch_options())``."""

    allow_split_server: bool = False
    devices_per_process: int = 1

    def launch_options(self) -> dict[str, Any]:
        return asdict(self)


PLACEMENT_OPTIONS = [
    click.option("--allow-split-server", is_flag=True,
                 help="On a Ray cluster: let one server's (or rack's) devices spread over "
                      "several nodes when no node has room for all of them (its IPU-Links "
                      "then cross the network; default: refuse)."),
    click.option("--devices-per-process", type=click.IntRange(1, MAX_DEVICES_PER_PROCESS),
                 default=1, show_default=True,
                 help="Run up to N devices of a server (or rack) in one Ray worker process: "
                      "a faster, lighter launch for large PODs, but devices sharing a "
                      "process fail and restart together (default: each card or IPU-M2000 "
                      "a process of its own)."),
]


def placement_options(command: Command) -> Command:
    """Add the options of :data:`PLACEMENT_OPTIONS` to ``command``, which receives them as
    one ``placement`` argument."""

    @functools.wraps(command)
    def with_placement(*args: Any, allow_split_server: bool, devices_per_process: int,
                       **kwargs: Any) -> Any:
        return command(*args, placement=Placement(allow_split_server, devices_per_process),
                       **kwargs)

    wrapped: Any = with_placement
    for option in reversed(PLACEMENT_OPTIONS):
        wrapped = option(wrapped)
    return wrapped
