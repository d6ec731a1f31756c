"""``ipupod workload import MODEL --out net.yaml``: a PyTorch or ONNX network as a workload
file, for ``train --model net.yaml`` and the reports (``docs/your-own-model.md``).

MODEL is ``path/to/file.py:factory`` (a function returning a ``torch.nn.Module``; give
``--input-shape``) or an ONNX file. Needs the extra: ``pip install -e '.[torch]'``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from cluster.cli.paths import CheckedPath
from cluster.errors import UserError, quoted
from cluster.model.units import format_flops, plural
from cluster.training.importers.notes import ImportNote
from cluster.training.importers.source import import_model, write_workload

MAX_SHAPE_TEXT = 200


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """``1,3,224,224`` as a tuple; None stays None; anything else a UserError."""
    if text is None:
        return None
    parts = [part.strip() for part in text.split(",")]
    if len(text) > MAX_SHAPE_TEXT or not all(p.isdecimal() and p.isascii() for p in parts):
        raise UserError(f"--input-shape takes whole numbers separated by commas, batch first "
                        f"(e.g. 1,3,224,224), not {quoted(text)}")
    return tuple(int(p) for p in parts)


@click.group("workload")
def workload_group() -> None:
    """Make workload files: import a PyTorch or ONNX network."""


@workload_group.command("import")
@click.argument("model")
@click.option("--out", type=CheckedPath(dir_okay=False, path_type=Path), required=True,
              help="The workload YAML file to write (replaced atomically).")
@click.option("--input-shape", default=None,
              help="One input's shape, batch first (1,3,224,224): needed for a PyTorch "
                   "factory (unless it returns (module, sample)); for ONNX, fixes a "
                   "symbolic dimension.")
@click.option("--input-dtype", type=click.Choice(["float", "int64"]), default="float",
              show_default=True, help="A PyTorch factory's input: floats, or token ids "
                                      "(0 and 1) for a model that starts with an embedding.")
@click.option("--name", default=None, help="The workload's name (default: the factory's "
                                           "name or the file's stem).")
@click.option("--strict", is_flag=True,
              help="Refuse a model with an op whose FLOPs are not known, instead of warning.")
def import_command(model: str, out: Path, input_shape: str | None, input_dtype: str,
                   name: str | None, strict: bool) -> None:
    """Import MODEL (file.py:factory or model.onnx) as a workload file."""
    if name is not None and (not name.strip() or not name.isprintable() or len(name) > 200):
        raise UserError(f"--name must be printable text of 1 to 200 characters, not "
                        f"{quoted(name)}")
    with warnings.catch_warnings(record=True) as caught:  # torch's own warnings: dropped
        warnings.simplefilter("always", ImportNote)
        workload = import_model(model, parse_shape(input_shape), name, strict,
                                integer_input=input_dtype == "int64")
    for warning in caught:
        if issubclass(warning.category, ImportNote):
            click.echo(f"warning: {warning.message}", err=True)
    write_workload(workload, out, f"Imported by `ipupod workload import` from {model}\n"
                                  "Counts are per sample; see docs/your-own-model.md")
    click.echo(f"wrote {out}: {workload.name}, {plural(len(workload.layers), 'layer')}, "
               f"{plural(workload.parameter_count, 'parameter')}, "
               f"{format_flops(workload.forward_flops)} forward per sample")
