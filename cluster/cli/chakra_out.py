"""``ipupod train --chakra-out DIR``: the priced step written as a Chakra trace, one file
per rank (:mod:`cluster.training.chakra.step_export`): checked before the run (the
folder's parent exists, no trace is there already, the run is one the export covers) and
written after it, with a note saying how to replay it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.cli.paths import CheckedPath, check_output_folder
from cluster.errors import UserError, quoted
from cluster.model.units import plural
from cluster.training.chakra.et_writer import write_chakra_trace
from cluster.training.chakra.step_export import StepExport, step_export
from cluster.training.plan import TrainPlan

TRACE_NAME = "step"  # the files: DIR/step.RANK.et
F = TypeVar("F", bound=Callable[..., Any])


def chakra_out_option(function: F) -> F:
    """The ``--chakra-out DIR`` option (parameter ``chakra_out``)."""
    return click.option("--chakra-out", "chakra_out", default=None, metavar="DIR",
                        type=CheckedPath(file_okay=False, path_type=Path),
                        help="Also write the priced step as a Chakra execution trace, "
                             "DIR/step.RANK.et per IPU (data-parallel runs, column "
                             "splits, one-replica pipelines, one stage of tensor groups, "
                             "expert groups; docs/chakra.md); `ipupod replay "
                             "DIR/step` replays it.")(function)


def prepare_export(folder: Path, plan: TrainPlan) -> StepExport:
    """Refuse, before the run, a folder that cannot take the trace or a run the export
    does not cover; the export, ready to write."""
    check_output_folder(folder, "--chakra-out")
    if folder.is_dir() and (any(folder.glob("*.et")) or any(folder.glob("*.et.gz"))):
        raise UserError(f"--chakra-out {quoted(str(folder))} already holds Chakra trace "
                        "files (.et): choose an empty or new folder")
    return step_export(plan)


def write_export(folder: Path, export: StepExport, topology_spec: str) -> None:
    """Write the trace and say on stderr where, and how to replay it."""
    try:
        written = write_chakra_trace(folder, TRACE_NAME, export.ranks)
    except OSError as error:
        raise UserError(f"--chakra-out {quoted(str(folder))}: "
                        f"{error.strerror or error}") from None
    click.echo(f"note: Chakra trace written to {folder}/ ({plural(len(written), 'rank')}, "
               f"{TRACE_NAME}.RANK.et); replay it: ipupod replay {folder / TRACE_NAME} "
               f"--topology {topology_spec} --dtype {export.dtype} --algorithm "
               f"{export.algorithm}", err=True)
