"""The ``ipupod`` command line.

``ipupod bench COLLECTIVE`` sweeps sizes like nccl-tests; ``ipupod topology show SPEC``
describes a topology. User mistakes print one ``error:`` line (what was wrong, what to do)
and exit with status 2, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, redirect_stdout
from functools import partial

import click

from cluster.errors import UserError
from cluster.model.spec import DEFAULT_TOPOLOGY, load_topology
from cluster.model.units import parse_size
from ipu_node.errors import DeviceError

COLLECTIVE_NAMES = ["allreduce", "reduce-scatter", "all-gather", "broadcast", "all-to-all"]


class SizeType(click.ParamType):
    """A byte count with an optional K/M/G suffix (powers of 1024)."""

    name = "size"

    def convert(self, value, param, ctx):  # type: ignore[no-untyped-def]
        try:
            return parse_size(value)
        except UserError as error:
            self.fail(str(error), param, ctx)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ipupod")
def cli() -> None:
    """Emulate Graphcore IPU-POD clusters: topologies, collectives and their simulated time."""


@cli.command()
@click.argument("collective", type=click.Choice(COLLECTIVE_NAMES, case_sensitive=False))
@click.option("--topology", "topology_spec", default=DEFAULT_TOPOLOGY, show_default=True,
              help="A preset (dss8440, dss8440xN, pod16 ... pod65536) or a YAML file.")
@click.option("--mode", type=click.Choice(["phantom", "real"]), default="phantom",
              show_default=True,
              help="phantom: sizes only, no devices, any scale; real: data through emulated "
                   "devices (Ray actors, gRPC links).")
@click.option("--ray-address", default=None,
              help="Real mode: an existing Ray cluster (default: RAY_ADDRESS, else local Ray).")
@click.option("-b", "--minbytes", "min_bytes", type=SizeType(), default="1M", show_default=True,
              help="Smallest size, bytes (K/M/G = powers of 1024).")
@click.option("-e", "--maxbytes", "max_bytes", type=SizeType(), default="128M",
              show_default=True, help="Largest size, bytes.")
@click.option("-f", "--stepfactor", "factor", type=float, default=2.0, show_default=True,
              help="Multiply the size by this from one row to the next.")
@click.option("--algorithm", default="auto", show_default=True,
              help="auto, clockwise_ring (ring), anticlockwise_ring, bidirectional_ring_pair, "
                   "hierarchical, halving_doubling.")
@click.option("--dtype", type=click.Choice(["float32", "float16", "int32"]), default="float32",
              show_default=True)
@click.option("--op", type=click.Choice(["sum", "mean", "max", "min"]), default="sum",
              show_default=True)
@click.option("--group", "group_text", default="all", show_default=True,
              help="Replica groups: all, consecutive:K or orthogonal:K (K replicas per group).")
@click.option("--root", type=int, default=0, show_default=True, help="Broadcast root rank.")
@click.option("--figures", type=click.Choice(["seed", "public"]), default="seed",
              show_default=True,
              help="Where seed and public figures disagree, which to use (presets; a YAML "
                   "file says its own).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of rows.")
@click.option("--partition", default=None,
              help="Run on this partition of a running `ipupod serve` (the service runs it).")
@click.option("--host", default=None, help="With --partition: the service's host.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="With --partition: the service's port.")
@click.option("--token-file", default=None, help="With --partition: the token file.")
def bench(collective: str, topology_spec: str, mode: str, min_bytes: int, max_bytes: int,
          factor: float, algorithm: str, dtype: str, op: str, group_text: str, root: int,
          figures: str, as_json: bool, ray_address: str | None, partition: str | None,
          host: str | None, port: int | None, token_file: str | None) -> None:
    """Sweep sizes of a COLLECTIVE and print simulated time and bandwidth per size."""
    if partition:
        from cluster.cli.service import bench_on_partition

        return bench_on_partition(partition, collective, mode, min_bytes, max_bytes, factor,
                                  algorithm, dtype, op, group_text, root, as_json, host, port,
                                  token_file)
    from gcl.algorithms import algorithm as check_algorithm
    from gcl.bench import format_row, preamble, rows_to_json, run_phantom, sizes, summary_line
    from gcl.collectives import collective as lookup
    from gcl.groups import CommGroup

    coll = lookup(collective)
    if algorithm != "auto":
        check_algorithm(algorithm, coll)
    group = CommGroup.parse(group_text)
    byte_sizes = sizes(min_bytes, max_bytes, factor)
    topology = load_topology(topology_spec, figures)
    with ExitStack() as stack:
        out = stack.enter_context(ray_chatter_to_stderr()) if mode == "real" else sys.stdout
        echo = partial(click.echo, file=out)
        if mode == "real":
            from ipu_node.bench import run_real
            from ipu_node.pod import EmulatedPod

            pod = EmulatedPod.launch(topology, ray_address=ray_address)
            stack.callback(pod.shutdown, stop_ray=True)
            rows = run_real(pod, coll, byte_sizes, dtype=dtype, op=op, algorithm_name=algorithm,
                            group=group, root=root)
        else:
            on_phase = stack.enter_context(phase_progress())
            rows = run_phantom(coll, topology, byte_sizes, dtype=dtype, op=op,
                               algorithm_name=algorithm, group=group, root=root,
                               on_phase=on_phase)
        if as_json:
            echo(rows_to_json(list(rows)))
            return
        first = next(rows)  # a request that cannot be scheduled fails before any output
        echo(preamble(coll, topology, group, mode, root))
        done = [first]
        echo(format_row(first))
        for row in rows:
            echo(format_row(row))
            done.append(row)
        echo(summary_line(done))


@contextmanager
def ray_chatter_to_stderr() -> Iterator:
    """Ray prints its own warnings to standard output; while devices run, send anything
    printed there to standard error, and yield the real standard output for our results
    (so ``--json`` output stays parseable)."""
    real = sys.stdout
    with redirect_stdout(sys.stderr):
        yield real


PROGRESS_MIN_PHASES = 200


@contextmanager
def phase_progress() -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error for long simulations (many distinct phases), shown
    only on a terminal so that piped output stays clean."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = None

        def update(done: int, total: int) -> None:
            nonlocal task
            if total < PROGRESS_MIN_PHASES:
                return
            if task is None or done == 1:
                if task is not None:
                    progress.remove_task(task)
                task = progress.add_task("simulating supersteps", total=total)
            progress.update(task, completed=done)

        yield update


@cli.group()
def topology() -> None:
    """Inspect topologies: presets and YAML files."""


@topology.command("show")
@click.argument("spec", default=DEFAULT_TOPOLOGY)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "dot"]), default="text",
              show_default=True)
@click.option("--figures", type=click.Choice(["seed", "public"]), default="seed",
              show_default=True)
def topology_show(spec: str, fmt: str, figures: str) -> None:
    """Summarise SPEC: IPUs, cards or machines, servers, links, bisection bandwidth."""
    from cluster.model.topology_show import render_dot, render_json, render_text, summarize

    built = load_topology(spec, figures)
    if fmt == "dot":
        click.echo(render_dot(built))
    else:
        summary = summarize(built)
        click.echo(render_json(summary) if fmt == "json" else render_text(summary))


@topology.command("list")
def topology_list() -> None:
    """List the presets."""
    from cluster.model.presets import presets

    for entry in presets():
        click.echo(f"{entry.example:<32} {entry.summary}")


def _add_training_commands() -> None:
    from cluster.cli.service import register
    from cluster.cli.train import train_command, train_report_command

    cli.add_command(train_command)
    cli.add_command(train_report_command)
    register(cli)


_add_training_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning user errors into one clear line and status 2."""
    try:
        cli.main(args=argv, prog_name="ipupod", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except UserError as error:
        click.echo(f"error: {error}", err=True)
        sys.exit(2)
    except DeviceError as error:  # a device or link failed: say which
        click.echo(f"error: {error}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
