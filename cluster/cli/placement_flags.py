"""``--allow-split-server`` and ``--devices-per-process``: where a real-mode command's
devices go on Ray, and how many share a process (``serve``, ``bench``, ``train``;
docs/real-mode.md). The command gets both as one :class:`Placement`."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from cluster.model.spec import load_topology
from cluster.model.topology import Topology
from ipu_node.device_spec import device_specs

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod

Command = TypeVar("Command", bound=Callable[..., Any])
MAX_DEVICES_PER_PROCESS = 64  # a rack's 16 IPU-M2000s fit in one; more buys nothing
MANY_PROCESSES = 32  # from here on, a launch says how to start fewer
SUGGESTED_DEVICES_PER_PROCESS = 4


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


def launch_pod(spec: str | Topology, ray_address: str | None, placement: Placement,
               **options: Any) -> EmulatedPod:
    """``EmulatedPod.launch`` as placed; a launch of many processes says first, on
    standard error, how to start fewer (:func:`process_note`)."""
    topology = load_topology(spec) if isinstance(spec, str) else spec
    note = process_note(topology, placement)
    if note:
        print(note, file=sys.stderr, flush=True)
    from ipu_node.pod import EmulatedPod  # Ray: only once devices are wanted

    return EmulatedPod.launch(topology, ray_address=ray_address, **options,
                              **placement.launch_options())


def process_note(topology: Topology, placement: Placement) -> str | None:
    """A ``note:`` line when ``topology`` would start many device processes, one each."""
    devices = len(device_specs(topology))
    if placement.devices_per_process > 1 or devices < MANY_PROCESSES:
        return None
    fewer = -(-devices // SUGGESTED_DEVICES_PER_PROCESS)
    return (f"note: {topology.name} starts {devices} device processes, about 0.6 CPU seconds "
            f"each; --devices-per-process {SUGGESTED_DEVICES_PER_PROCESS} starts about "
            f"{fewer} (docs/real-mode.md, \"Several devices per process\")")
