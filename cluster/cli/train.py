"""``ipupod train`` and ``ipupod train-report``: data-parallel training on emulated servers."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.cli.made_by import command_settings, settings_record
from cluster.cli.output import Progress, progress, ray_chatter_to_stderr
from cluster.cli.paths import CheckedPath
from cluster.errors import UserError, quoted
from cluster.training.config import IPUS_PER_REPLICA, MLP, OPTIMIZER_STATE, SPLITS, TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.fit import check_fits, default_topology, resolve
from cluster.training.memory_plan import stage_memory
from cluster.training.pipeline.schedules import schedule_names
from cluster.training.placement import server_ipus, topology_for
from cluster.training.reports.servers import format_table, scaling_table, write_report
from cluster.training.reports.settings import made_by
from cluster.training.reports.settings import markdown as settings_markdown
from cluster.training.trainer import train
from gcl.modes import Mode

Command = TypeVar("Command", bound=Callable[..., Any])


def _counts_option(text: str | None, option: str,
                   example: str = "4,4,6") -> tuple[int, ...] | None:
    """Whole numbers of 1 or more separated by commas (``4,4,6``); None when the option
    is not given."""
    if text is None:
        return None
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UserError(f"{option} takes whole numbers separated by commas, e.g. {example}; "
                        f"not {text[:60]!r}") from None
    if not counts or len(counts) > 64 or min(counts) < 1:
        raise UserError(f"{option} takes 1 to 64 numbers of 1 or more, separated by commas")
    return counts


def _hidden(text: str | None) -> tuple[int, ...] | None:
    """Layer widths from ``--hidden`` (``128,64``); None: the default."""
    return _counts_option(text, "--hidden", "128,64")


def run(config: TrainConfig, ray_address: str | None, on_step: Progress) -> dict[str, Any]:
    """Launch the servers if the run needs devices, train, shut them down."""
    if config.mode != "real":
        return train(config, on_step=on_step)
    # Ray: only for real mode (phantom training needs no devices)
    from ipu_node.pod import EmulatedPod

    topology = topology_for(config)
    config.validate(topology, server_ipus(topology)[0].size)  # before any actor starts
    check_fits(config, topology, stage_memory(config, topology))
    pod = EmulatedPod.launch(topology, ray_address=ray_address)
    try:
        return train(config, pod=pod, on_step=on_step)
    finally:
        pod.shutdown()


PIPELINE_SCHEDULE_OPTION = click.option(
    "--pipeline-schedule", type=click.Choice(schedule_names()),
    default=DEFAULTS.pipeline_schedule,
    show_default=True,
    help="Order of the stages' passes: fill-drain (GPipe), 1f1b (less activation memory) or "
         "popart (PopART's lock-step cycles, the copies between them; at least 2K - 1 "
         "micro-batches for K stages: --ipus-per-replica, one more with "
         "--final-stage-on-first-ipu).")
ALGORITHM_OPTION = click.option("--algorithm", default=DEFAULTS.algorithm, show_default=True,
                                help="Allreduce algorithm for the gradients (or auto).")
EFFICIENCY_SCALE_OPTION = click.option(
    "--efficiency-scale", type=float, default=DEFAULTS.efficiency_scale, show_default=True,
    help="Every layer kind's compute efficiency times this, for a workload: what `ipupod "
         "calibrate` derives from a measured step time.")
"""Options ``scaling-report`` takes too, to report a calibrated prediction."""
OPTIMIZER_STATE_OPTION = click.option(
    "--optimizer-state", type=click.Choice(list(OPTIMIZER_STATE)),
    default=DEFAULTS.optimizer_state, show_default=True,
    help="Where the optimiser's values live: In-Processor-Memory (Poplar's default, the only "
         "place a DSS 8440 has), an IPU-M2000's Streaming Memory (streamed in for each "
         "update), or sharded over the replicas of a server or rack (PopART's replicated "
         "tensor sharding: each updates its share), or both.")
GRADIENT_DTYPE_OPTION = click.option(
    "--gradient-dtype", type=click.Choice(["float16", "float32"]), default=None,
    help="Number format of the gradients allreduced (default: the model's).")
MICRO_BATCH_OPTION = click.option(
    "--micro-batch", "--batch-size", "micro_batch", type=int, default=None,
    help="Samples per replica per micro-batch (default: the largest of "
         f"{', '.join(map(str, DEFAULTS.micro_batches))} that fits In-Processor-Memory).")

COMMON_OPTIONS = [
    click.option("--replicas-per-server", type=int, default=None,
                 help="Replicas per server (default: as many as fit, 16 IPUs / "
                      "--ipus-per-replica)."),
    click.option("--ipus-per-replica", "--gcd", "ipus_per_replica",
                 type=click.Choice([str(k) for k in IPUS_PER_REPLICA]), default=None,
                 help="IPUs per replica (its Graph Compile Domain; --gcd is the same): a "
                      "pipeline of as many stages on successive IPUs (default: the fewest "
                      "that fit In-Processor-Memory)."),
    click.option("--split", type=click.Choice(list(SPLITS)), default=DEFAULTS.split,
                 show_default=True,
                 help="How a replica's layers spread over its IPUs: pipeline stages, or the "
                      "MLP's widest layer split by columns (shard)."),
    PIPELINE_SCHEDULE_OPTION,
    click.option("--recompute/--no-recompute", default=None,
                 help="Keep only checkpoints between passes and recompute the rest in the "
                      "backward pass (less memory, one more forward's FLOPs). Default: as "
                      "the model's published IPU recipe (on for the built-in workloads, off "
                      "for the MLP)."),
    click.option("--model", default=DEFAULTS.model, show_default=True,
                 help="What to train: mlp (the NumPy MLP, real or phantom), or a workload "
                      "priced in phantom mode: resnet50, bert-base, bert-large, gpt2-xl, or "
                      "a workload YAML file (docs/workloads.md)."),
    click.option("--sequence-length", type=int, default=None,
                 help="Tokens per sample for bert-base, bert-large and gpt2-xl."),
    GRADIENT_DTYPE_OPTION,
    OPTIMIZER_STATE_OPTION,
    MICRO_BATCH_OPTION,
    click.option("--gradient-accumulation", type=int, default=DEFAULTS.accumulation,
                 show_default=True,
                 help="Micro-batches per step: in flight in the pipeline (1 to 65536)."),
    click.option("--steps", type=int, default=DEFAULTS.steps, show_default=True,
                 help="Training steps to run (1 to 1,000,000)."),
    ALGORITHM_OPTION,
    click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True),
    click.option("--lr", type=float, default=DEFAULTS.lr, show_default=True),
    click.option("--momentum", type=float, default=DEFAULTS.momentum, show_default=True),
    click.option("--hidden", default=None,
                 help="Hidden layer widths, e.g. 128,64 (default: 128, once per stage "
                      "boundary, at least once)."),
    click.option("--layers-per-ipu", default=None,
                 help="Consecutive layers on each pipeline stage, e.g. 4,4,6,7,7,7,7,9 (a "
                      "recipe's placement; default: balanced on FLOPs)."),
    click.option("--final-stage-on-first-ipu", is_flag=True,
                 help="One pipeline stage more, the last, run on the replica's first IPU "
                      "beside the first stage (Graphcore's BERT recipes: the heads and loss "
                      "beside the embeddings); --layers-per-ipu then gives one count more."),
    EFFICIENCY_SCALE_OPTION,
    click.option("--ray-address", default=None, help="An existing Ray cluster."),
]


def common_options(command: Command) -> Command:
    """The model, batch and optimiser options both commands take."""
    for option in reversed(COMMON_OPTIONS):
        command = option(command)
    return command


def make_config(servers: int | None, mode: str | None, check: bool,
                replicas_per_server: int | None, ipus_per_replica: str | None, split: str,
                pipeline_schedule: str, recompute: bool | None, model: str,
                sequence_length: int | None, gradient_dtype: str | None,
                optimizer_state: str, micro_batch: int | None, gradient_accumulation: int,
                steps: int, algorithm: str, seed: int, lr: float, momentum: float,
                hidden: str | None, efficiency_scale: float = DEFAULTS.efficiency_scale,
                layers_per_ipu: str | None = None, final_stage_on_first_ipu: bool = False,
                topology: str | None = None) -> TrainConfig:
    """The training configuration the options describe, each default left out resolved
    (:func:`cluster.training.fit.resolve`): the topology and mode by the model, the
    micro-batch and IPUs per replica the first that fit."""
    free = frozenset(name for name, value in (("micro_batch", micro_batch),
                                              ("ipus_per_replica", ipus_per_replica))
                     if value is None)
    if topology is None:
        topology, servers = default_topology(model, servers)
    config = TrainConfig(
        servers=servers or 1, topology=topology, model=model, split=split,
        ipus_per_replica=int(ipus_per_replica or DEFAULTS.ipus_per_replica[0]),
        sequence_length=sequence_length, gradient_dtype=gradient_dtype,
        optimizer_state=optimizer_state, replicas_per_server=replicas_per_server or 0,
        pipeline_schedule=pipeline_schedule, recompute=recompute,
        micro_batch=micro_batch or DEFAULTS.micro_batches[0],
        accumulation=gradient_accumulation, steps=steps, algorithm=algorithm, seed=seed,
        lr=lr, momentum=momentum, hidden=_hidden(hidden), check=check,
        mode=Mode(mode or (Mode.REAL if model == MLP else Mode.PHANTOM)),
        efficiency_scale=efficiency_scale,
        layers_per_ipu=_counts_option(layers_per_ipu, "--layers-per-ipu"),
        final_stage_on_first_ipu=final_stage_on_first_ipu)
    return resolve(config, free)


def _echo_record(record: dict[str, Any], config: TrainConfig,
                 echo: Callable[[str], None]) -> None:
    """A training run as text: the set-up, a line per step, throughput and checks."""
    first = record["steps"][0]
    pipelined = config.ipus_per_replica > 1 and not config.sharded
    wrapped = (f" of {config.pipeline_stages} stages, the last on the first IPU"
               if config.final_stage_on_first_ipu else "")
    shape = (f"{config.ipus_per_replica} IPUs each: {config.pipeline_schedule} pipeline"
             f"{wrapped}, "
             f"{config.accumulation} micro-batches in flight"
             f"{', recomputation' if config.recomputes else ''}" if pipelined else
             f"{config.ipus_per_replica} IPUs each, the widest layer sharded" if config.sharded
             else "1 IPU each")
    echo(f"# {config.model} on {record['topology']} ({record['machines']}): "
         f"{config.replicas} replicas "
         f"({shape}), global batch {config.global_batch}, {config.mode} mode; times simulated")
    columns = [("compute", "compute_seconds"), ("host-io", "host_io_seconds"),
               ("local-AR", "local_allreduce_seconds"),
               ("global-AR", "global_allreduce_seconds"), ("update", "update_seconds")]
    if pipelined:
        columns[1:1] = [("bubble", "pipeline_bubble_seconds"),
                        ("stages-io", "inter_stage_seconds")]
    if config.sharded:
        columns[1:1] = [("shard-io", "shard_exchange_seconds")]
    if first.get("weight_gather_seconds"):
        columns.append(("gather", "weight_gather_seconds"))
    echo(f"{'step':>5} {'loss':>10} {'step(ms)':>9} "
         + " ".join(f"{title:>9}" for title, _ in columns))
    for row in record["steps"]:
        loss = "-" if row["loss"] is None else f"{row['loss']:.6f}"
        echo(f"{row['step']:>5} {loss:>10} {row['sim_seconds'] * 1e3:>9.4f} "
             + " ".join(f"{row[key] * 1e3:>9.4f}" for _, key in columns))
    echo(f"# throughput {record['throughput_samples_per_sim_second']:,.0f} samples per "
         f"simulated second; step {first['sim_seconds'] * 1e3:.4f} ms simulated")
    if record["replicas_identical"] is not None:
        echo(f"# replicas identical after every step: {record['replicas_identical']}")
    if "reference_max_rel_error" in record:
        echo(f"# largest relative difference from single-process training: "
             f"{record['reference_max_rel_error']:.2e}")


@click.command("train")
@click.option("--servers", type=int, default=None,
              help=f"DSS 8440 servers (default: {DEFAULTS.servers} for the MLP; a workload "
                   f"runs on --topology {DEFAULTS.workload_topology} unless given this).")
@click.option("--topology", "topology_spec", default=None,
              help="Train on this topology instead (a preset such as pod64, or a YAML file); "
                   "replicas fill each server or rack.")
@click.option("--mode", type=click.Choice([Mode.REAL.value, Mode.PHANTOM.value]), default=None,
              help="real (bytes on the emulated devices) or phantom (timing only); default: "
                   "real for the MLP, phantom for a workload.")
@click.option("--check", is_flag=True,
              help="Also train the single-process reference and report the largest relative "
                   "difference of the losses.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's report as JSON (the step's parts in seconds).")
@common_options
def train_command(servers: int | None, topology_spec: str | None, mode: str | None,
                  check: bool, as_json: bool, ray_address: str | None, **options: Any) -> None:
    """Train an MLP data-parallel across emulated DSS 8440 servers (or a POD)."""
    config = make_config(servers, mode, check, topology=topology_spec, **options)
    assumed = settings_record(command_settings(config))
    with ray_chatter_to_stderr() as out, progress("training", total=config.steps) as on_step:
        record = {**run(config, ray_address, on_step), **assumed}
    echo = partial(click.echo, file=out)
    if as_json:
        echo(json.dumps(record, indent=2))
    else:
        _echo_record(record, config, echo)
        echo(f"# every setting: {record['made_by']}")


def _server_counts(text: str) -> list[int]:
    """Server counts from ``--servers`` (``1,2,4,8``), sorted, without repeats."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(f"--servers takes counts separated by commas, not {text!r}") from None
    if not counts or counts[0] < 1:
        raise UserError("--servers needs at least one count of 1 or more")
    return counts


@click.command("train-report")
@click.option("--servers", "server_list", default="1,2,4,8", show_default=True,
              help="Server counts to compare, e.g. 1,2,4,8.")
@click.option("--real-up-to", type=int, default=4, show_default=True,
              help="Run real mode up to this many servers, phantom mode beyond.")
@click.option("--out", "out_dir", type=CheckedPath(file_okay=False, path_type=Path),
              default=Path("train-report"), show_default=True,
              help="Folder for the report (README.md and plots); made if missing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the settings and the table's rows (seconds) as JSON instead.")
@common_options
def train_report_command(server_list: str, real_up_to: int, out_dir: Path, as_json: bool,
                         ray_address: str | None, **options: Any) -> None:
    """Scaling report: throughput and efficiency for several server counts, with plots."""
    counts = _server_counts(server_list)
    runs = []
    with report_folder(out_dir), ray_chatter_to_stderr() as out:  # checked before training
        for servers in counts:
            real = servers <= real_up_to and options["model"] == MLP
            config = make_config(servers, "real" if real else "phantom", False, **options)
            with progress(f"{servers} servers ({config.mode})",
                          total=config.steps) as on_step:
                runs.append(run(config, ray_address, on_step))
            if len(runs) == 1:
                assumed = command_settings(config, swept=("--servers",))
        paths = write_report(runs, out_dir, made_by("train-report", assumed),
                             settings_markdown(assumed))
    if as_json:
        click.echo(json.dumps({**settings_record(assumed),
                               "rows": scaling_table(runs)}, indent=2), file=out)
        return
    click.echo(format_table(scaling_table(runs)), file=out)
    click.echo(f"# report: {paths['readme']}", file=out)


@contextmanager
def report_folder(folder: Path) -> Iterator[None]:
    """:func:`_check_writable`, then the report's work; the folders made here (``--out``
    and any missing parents) are removed again, if still empty, when that work fails, so
    a mistake leaves nothing behind."""
    made = [path for path in (folder, *folder.parents) if not path.exists()]
    try:
        _check_writable(folder)
        yield
    except BaseException:
        for path in made:  # innermost first; only an empty folder goes
            with suppress(OSError):
                path.rmdir()
        raise


def _check_writable(folder: Path) -> None:
    """Make ``folder`` if missing and check a file can be written there, or a UserError;
    a folder whose README.md an ipupod report did not write is refused (the report would
    overwrite it: ``--out ''`` is the working directory)."""
    readme = folder / "README.md"
    if readme.is_file() and not _written_by_a_report(readme):
        raise UserError(f"{quoted(str(readme))} exists and is not an ipupod report: the "
                        "report would overwrite it; choose another --out folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(f"cannot write the report to {quoted(str(folder))}: "
                        f"{error.strerror or error}; choose another --out folder") from None


def _written_by_a_report(readme: Path) -> bool:
    """Whether ``readme`` starts as every ipupod report's README.md does ("Made by:" in
    its first lines)."""
    try:
        with open(readme, encoding="utf-8", errors="replace") as handle:
            return "Made by:" in handle.read(4096)
    except OSError:
        return False
