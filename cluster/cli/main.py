"""The ``ipupod`` command line: the root group and the table of its commands.

Each command lives in its own module (``cluster/cli/<module>.py``), imported only when the
command runs (or ``--help`` lists it), so that a command pays only for what it uses: ``ipupod
bench`` starts without Ray, gRPC or the service. Errors and output: :mod:`cluster.cli.output`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click

from cluster.cli.output import errors_as_lines, grpc_logging_off, results_only_on_stdout


@dataclass(frozen=True)
class LazyCommand:
    """Where a command lives (``"module:attribute"`` of its click command) and its one-line
    help, shown by ``ipupod --help`` without importing the module (``serve`` would import
    Ray)."""

    target: str
    short_help: str


COMMANDS = {
    "bench": LazyCommand("cluster.cli.bench:bench_command",
                         "Sweep sizes of a COLLECTIVE: simulated time and bandwidth."),
    "calibrate": LazyCommand("cluster.cli.fidelity:calibrate_command",
                             "Derive the compute efficiency from one measured step time."),
    "chakra": LazyCommand("cluster.cli.chakra:chakra_group",
                          "Read MLCommons Chakra execution traces (per-rank .et files)."),
    "create": LazyCommand("cluster.cli.vipu:create_group",
                          "V-IPU's verb first: `create partition NAME --size N`."),
    "devices": LazyCommand("cluster.cli.status:devices_command",
                           "IPUs like `gc-info --list-devices`: id, type, card, partition."),
    "fault": LazyCommand("cluster.cli.fault:fault_group",
                         "Kill cards, degrade, cut and heal links of a running POD."),
    "links": LazyCommand("cluster.cli.status:links_command",
                         "Links like `gc-links`: endpoints, type, bandwidth, bytes."),
    "list": LazyCommand("cluster.cli.vipu:list_group",
                        "V-IPU's verb first: `list partitions`."),
    "monitor": LazyCommand("cluster.cli.monitor:monitor_command",
                           "A live view of partitions, devices and link traffic."),
    "plan": LazyCommand("cluster.cli.plan:plan_command",
                        "The fastest layouts of a model on a topology that fit (phantom)."),
    "pipeline-report": LazyCommand("cluster.cli.reports:pipeline_report_command",
                                   "Pipelining report: throughput, bubble against stages."),
    "partition": LazyCommand("cluster.cli.partition:partition_group",
                             "Create, list, show and remove partitions (as `vipu` does)."),
    "replay": LazyCommand("cluster.cli.replay:replay_command",
                          "Replay a Chakra execution trace on an emulated POD (phantom)."),
    "remove": LazyCommand("cluster.cli.vipu:remove_group",
                          "V-IPU's verb first: `remove partition NAME`."),
    "scaling-report": LazyCommand("cluster.cli.reports:scaling_report_command",
                                  "Scaling report for a workload across POD presets."),
    "serve": LazyCommand("cluster.cli.serve:serve_command",
                         "Launch the emulated POD and serve its control API."),
    "show": LazyCommand("cluster.cli.vipu:show_group",
                        "V-IPU's verb first: `show partition NAME`."),
    "status": LazyCommand("cluster.cli.status:status_command",
                          "The service's topology, devices and partitions."),
    "validate": LazyCommand("cluster.cli.fidelity:validate_command",
                            "Published MLPerf step times against the emulator's."),
    "trace": LazyCommand("cluster.cli.trace:trace_group",
                         "Draw a --trace timeline as a Gantt chart (PNG)."),
    "topology": LazyCommand("cluster.cli.topology:topology_group",
                            "Inspect topologies: presets and YAML files."),
    "train": LazyCommand("cluster.cli.train:train_command",
                         "Train data-parallel (and pipelined) across emulated servers."),
    "train-report": LazyCommand("cluster.cli.train:train_report_command",
                                "Scaling report: throughput and efficiency per server count."),
    "workload": LazyCommand("cluster.cli.workload:workload_group",
                            "Import a PyTorch or ONNX network as a workload file."),
    "user": LazyCommand("cluster.cli.user:user_group",
                        "Add, list, remove users and rotate credentials (administrator)."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on demand, from a name -> :class:`LazyCommand`
    table (click's lazy-loading pattern)."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, LazyCommand],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command's name, without importing any."""
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command ``cmd_name``, its module imported now if it is a lazy one."""
        if cmd_name not in self.lazy_commands:
            return super().get_command(ctx, cmd_name)
        target = self.lazy_commands[cmd_name].target
        module, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their one-line help, from the table: no module is imported."""
        rows = [(name, self.lazy_commands[name].short_help) for name in self.list_commands(ctx)
                if name in self.lazy_commands]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, lazy_commands=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ipupod")
def cli() -> None:
    """Emulate Graphcore IPU-POD clusters: topologies, collectives and their simulated time."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into one clear line and status 2."""
    results_only_on_stdout()
    with errors_as_lines(), environment_kept():
        grpc_logging_off()
        cli.main(args=argv, prog_name="ipupod", standalone_mode=False)


@contextmanager
def environment_kept() -> Iterator[None]:
    """Run a command and then put ``os.environ`` back as it was: options that reach the
    client through a variable (``--tls-ca``) must not outlive the command, even when
    click stops at a later option's error before it cleans up."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)


if __name__ == "__main__":
    main()
