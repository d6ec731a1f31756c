"""Resolve a topology spec: a preset name (``dss8440x2``, ``pod64``) or a YAML file path."""

from __future__ import annotations

import os
from pathlib import Path

from cluster.errors import SpecError, quoted
from cluster.model.hardware import FigureChoice
from cluster.model.presets import PresetOptions, build_preset, is_preset
from cluster.model.topology import Topology
from cluster.model.topology_yaml import load_yaml_topology

DEFAULT_TOPOLOGY = "dss8440x2"


def load_topology(spec: str, figures: str = "seed") -> Topology:
    """Build the topology ``spec`` names; ``figures`` picks seed or public disputed figures
    for presets (a YAML file says its own). A preset name wins over a file of that name;
    a name with a folder in it, or of anything on disk, is a file's."""
    path_like = spec.endswith((".yaml", ".yml")) or os.sep in spec or _exists(spec)
    if path_like and not is_preset(spec):
        if not _exists(spec):
            raise SpecError(f"no topology file at {quoted(spec)}: check the path")
        return load_yaml_topology(spec)  # a directory or a FIFO: read_text says so
    return build_preset(spec, PresetOptions(figures=FigureChoice.all_from(figures)))


def _exists(spec: str) -> bool:
    """Whether ``spec`` names something on disk, a file or not (a name too long for the
    file system, or with a NUL byte, names nothing)."""
    try:
        return Path(spec).exists()
    except (OSError, ValueError):
        return False
