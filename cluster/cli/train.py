"""``ipupod train`` and ``ipupod train-report``: data-parallel training on emulated servers."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import click

from cluster.errors import UserError


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"--hidden takes layer widths separated by commas, e.g. 128,64; "
                        f"not {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise UserError("--hidden needs at least one layer width of 1 or more")
    return sizes


@contextmanager
def step_progress(total: int, label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error (on a terminal only)."""
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)
        yield lambda done, _total: progress.update(task, completed=done)


def run(config, ray_address: str | None, on_step) -> dict:
    """Launch the servers if the run needs devices, train, shut them down."""
    from cluster.training.trainer import topology_for, train

    if config.mode != "real":
        return train(config, on_step=on_step)
    from ipu_node.pod import EmulatedPod

    topology = topology_for(config)
    config.validate(topology)  # before any actor starts
    pod = EmulatedPod.launch(topology, ray_address=ray_address)
    try:
        return train(config, pod=pod, on_step=on_step)
    finally:
        pod.shutdown()


def common_options(fn):
    options = [
        click.option("--replicas-per-server", type=int, default=None,
                     help="Replicas per server (default: all, 16 with --gcd 1, 8 with --gcd 2)."),
        click.option("--gcd", type=click.Choice(["1", "2"]), default="1", show_default=True,
                     help="IPUs per replica: 1, or 2 (a replica per C2 card)."),
        click.option("--batch-size", type=int, default=32, show_default=True,
                     help="Samples per replica per micro-batch."),
        click.option("--gradient-accumulation", type=int, default=1, show_default=True),
        click.option("--steps", type=int, default=20, show_default=True),
        click.option("--algorithm", default="hierarchical", show_default=True,
                     help="Allreduce algorithm for the gradients (or auto)."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--lr", type=float, default=0.05, show_default=True),
        click.option("--momentum", type=float, default=0.9, show_default=True),
        click.option("--hidden", default="128", show_default=True,
                     help="Hidden layer widths, e.g. 128,64."),
        click.option("--ray-address", default=None, help="An existing Ray cluster."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def make_config(servers, mode, check, replicas_per_server, gcd, batch_size,
                gradient_accumulation, steps, algorithm, seed, lr, momentum, hidden):
    from cluster.training.trainer import IPUS_PER_SERVER, TrainConfig

    gcd = int(gcd)
    return TrainConfig(servers=servers, gcd=gcd,
                       replicas_per_server=replicas_per_server or IPUS_PER_SERVER // gcd,
                       micro_batch=batch_size, accumulation=gradient_accumulation, steps=steps,
                       algorithm=algorithm, seed=seed, lr=lr, momentum=momentum,
                       hidden=_hidden(hidden), mode=mode, check=check)


@click.command("train")
@click.option("--servers", type=int, default=2, show_default=True, help="DSS 8440 servers.")
@click.option("--topology", "topology_spec", default=None,
              help="Train on this topology instead (a preset such as pod64, or a YAML file); "
                   "replicas fill each server or rack.")
@click.option("--mode", type=click.Choice(["real", "phantom"]), default="real", show_default=True)
@click.option("--check", is_flag=True,
              help="Also train the single-process reference and report the largest relative "
                   "difference of the losses.")
@click.option("--json", "as_json", is_flag=True)
@common_options
def train_command(servers, topology_spec, mode, check, as_json, ray_address, **options) -> None:
    """Train an MLP data-parallel across emulated DSS 8440 servers (or a POD)."""
    from dataclasses import replace

    from cluster.cli.main import ray_chatter_to_stderr

    config = make_config(servers, mode, check, **options)
    if topology_spec:
        from cluster.training.trainer import server_ipus, topology_for

        config = replace(config, topology=topology_spec)
        topology = topology_for(config)
        per = server_ipus(topology)[0].size // config.gcd
        config = replace(config, servers=len(server_ipus(topology)),
                         replicas_per_server=options["replicas_per_server"] or per)
    with ray_chatter_to_stderr() as out, step_progress(config.steps, "training") as on_step:
        record = run(config, ray_address, on_step)
    echo = partial(click.echo, file=out)
    if as_json:
        echo(json.dumps(record, indent=2))
        return
    first = record["steps"][0]
    echo(f"# {record['topology']}: {config.servers} server(s), {config.replicas} replicas (GCD {config.gcd}), "
               f"global batch {config.global_batch}, {config.mode} mode; times simulated")
    echo(f"{'step':>5} {'loss':>10} {'step(ms)':>9} {'compute':>9} {'host-io':>9} "
               f"{'local-AR':>9} {'global-AR':>9}")
    for row in record["steps"]:
        loss = "-" if row["loss"] is None else f"{row['loss']:.6f}"
        echo(f"{row['step']:>5} {loss:>10} {row['sim_seconds'] * 1e3:>9.4f} "
                   f"{row['compute_seconds'] * 1e3:>9.4f} {row['host_io_seconds'] * 1e3:>9.4f} "
                   f"{row['local_allreduce_seconds'] * 1e3:>9.4f} "
                   f"{row['global_allreduce_seconds'] * 1e3:>9.4f}")
    echo(f"# throughput {record['throughput_samples_per_sim_second']:,.0f} samples per "
               f"simulated second; step {first['sim_seconds'] * 1e3:.4f} ms simulated")
    if record["replicas_identical"] is not None:
        echo(f"# replicas identical after every step: {record['replicas_identical']}")
    if "reference_max_rel_error" in record:
        echo(f"# largest relative difference from single-process training: "
                   f"{record['reference_max_rel_error']:.2e}")


@click.command("train-report")
@click.option("--servers", "server_list", default="1,2,4,8", show_default=True,
              help="Server counts to compare, e.g. 1,2,4,8.")
@click.option("--real-up-to", type=int, default=4, show_default=True,
              help="Run real mode up to this many servers, phantom mode beyond.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("docs/training"), show_default=True)
@common_options
def train_report_command(server_list, real_up_to, out_dir, ray_address, **options) -> None:
    """Scaling report: throughput and efficiency for several server counts, with plots."""
    from cluster.training.report import format_table, scaling_table, write_report

    try:
        counts = sorted({int(part) for part in server_list.split(",") if part.strip()})
    except ValueError:
        raise UserError(f"--servers takes counts separated by commas, not {server_list!r}") from None
    if not counts or counts[0] < 1:
        raise UserError("--servers needs at least one count of 1 or more")
    from cluster.cli.main import ray_chatter_to_stderr

    runs = []
    with ray_chatter_to_stderr() as out:
        for servers in counts:
            mode = "real" if servers <= real_up_to else "phantom"
            config = make_config(servers, mode, False, **options)
            with step_progress(config.steps, f"{servers} servers ({mode})") as on_step:
                runs.append(run(config, ray_address, on_step))
    command = "ipupod train-report " + " ".join(sys.argv[2:])
    paths = write_report(runs, out_dir, command)
    click.echo(format_table(scaling_table(runs)), file=out)
    click.echo(f"# report: {paths['readme']}", file=out)
