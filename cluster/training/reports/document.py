"""What every report is made of: its README, its PNG plots, the stacked bars of a step's
parts, and the mark by which a folder is known to hold one.

Every report's README starts with its title and :data:`MADE_BY`, the command that made it
with every setting spelt out (:mod:`.settings`), then :data:`SIM_NOTE`, the report's table,
its settings table and its plots; :func:`is_report` knows a README by that mark, so a
report may overwrite its own folder and no other. matplotlib is imported inside the
plotting functions so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cluster.training.step_parts import StepPart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MADE_BY = "Made by:"
"""The line above the command in every report's README: what :func:`is_report` looks for."""

SIM_NOTE = ("All times are simulated seconds on the emulated IPU-POD hardware (shown in ms), "
            "not wall-clock time on the machine that ran the emulator; throughput is samples "
            "per simulated second.")


def write_readme(out: Path, title: str, command: str, note: str, table: str, settings: str,
                 body: Sequence[str]) -> Path:
    """README.md in ``out`` (made if missing): the title, the command that made the report
    (every setting spelt out), ``note`` (what the times are), the table, the ``settings``
    table (Markdown, if any), then ``body``'s lines (the plots); returns its path."""
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {title}", "", MADE_BY, "", "```sh", command, "```", "", note, "", table, "",
             *(["## Settings", "", settings, ""] if settings else []), *body]
    readme = out / "README.md"
    readme.write_text("\n".join(lines), encoding="utf-8")
    return readme


def is_report(readme: Path) -> bool:
    """Whether ``readme`` starts as every report's README.md does (:data:`MADE_BY` in its
    first lines): a file a report may overwrite."""
    try:
        with open(readme, encoding="utf-8", errors="replace") as handle:
            return MADE_BY in handle.read(4096)
    except OSError:
        return False


def pyplot() -> ModuleType:
    """matplotlib.pyplot on the non-interactive Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Figure, path: Path | str) -> Path:
    """Write the figure as PNG at ``path`` (parent folders created), close it, return path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    fig.clf()
    pyplot().close(fig)
    return path


def legend(ax: Any, **placement: Any) -> None:
    """The plot's legend, or a note that nothing fitted to plot (no empty legend)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**placement)
    else:
        ax.text(0.5, 0.5, "no configuration to plot", transform=ax.transAxes,
                ha="center", va="center", alpha=0.6)


def plot_breakdown(rows: Sequence[Mapping[str, Any]], parts: Sequence[StepPart],
                   ticks: Sequence[str], path: Path, *, xlabel: str | None, ylabel: str,
                   title: str) -> Path:
    """Stacked bars, one per row, at ``ticks``: each of ``parts``' simulated seconds of
    the row's step, in ms, bottom up in the order given; the legend beside the plot."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5))
    positions = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for part in parts:
        heights = [row[part.key] * 1e3 for row in rows]
        ax.bar(positions, heights, bottom=bottom, label=part.label, width=0.6)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(positions, list(ticks))
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    legend(ax, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_png(fig, path)
