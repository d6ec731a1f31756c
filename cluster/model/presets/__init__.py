"""Topology presets: ``dss8440``, ``dss8440xN``, ``pod16``, ``pod64`` ... ``pod65536``.

A preset is one function, registered with :func:`preset` under a regular expression that
its spec strings match. Adding a preset is one new module here that calls :func:`preset`
(the registry finds the module itself: :class:`~cluster.model.plugins.Registry`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cluster.errors import SpecError, quoted
from cluster.model.hardware import SEED_FIGURES, FigureChoice, LinkType
from cluster.model.plugins import Registry
from cluster.model.topology import Topology

if TYPE_CHECKING:
    from cluster.model.builder import TopologyBuilder


@dataclass(frozen=True)
class LinkOverride:
    """Replace a link type's bandwidth (GB/s per direction) or latency (ns) in a preset."""

    bandwidth_GBps: float | None = None
    latency_ns: float | None = None


@dataclass(frozen=True)
class PresetOptions:
    """How to build a preset: which disputed figures, and any overridden numbers."""

    figures: FigureChoice = SEED_FIGURES
    link_overrides: tuple[tuple[str, LinkOverride], ...] = ()
    sync_local_seconds: float | None = None
    sync_global_seconds: float | None = None

    def link(self, link_type: LinkType) -> LinkType:
        """The link type with this preset's overrides for it applied."""
        for name, override in self.link_overrides:
            if name == link_type.name:
                return link_type.with_overrides(
                    None if override.bandwidth_GBps is None else override.bandwidth_GBps * 1e9,
                    None if override.latency_ns is None else override.latency_ns / 1e9,
                )
        return link_type


PresetBuilder = Callable[[re.Match[str], PresetOptions], Topology]


@dataclass(frozen=True)
class Preset:
    """A registered preset: the spec strings it builds, an example and a one-line summary."""

    pattern: re.Pattern[str]
    example: str
    summary: str
    build: PresetBuilder


def _check(entry: Preset) -> None:
    """A TypeError unless ``entry`` builds from a callable and shows an example."""
    if not callable(entry.build) or not entry.example or not entry.summary:
        raise TypeError(f"preset {entry.pattern.pattern!r} needs a builder, an example and "
                        "a summary")


_PRESETS: Registry[Preset] = Registry("preset", __name__, check=_check)


def preset(pattern: str, example: str,
           summary: str) -> Callable[[PresetBuilder], PresetBuilder]:
    """Register ``fn(match, options) -> Topology`` for spec strings matching ``pattern``
    (the pattern is the preset's name in the registry: one builder each)."""

    def register(fn: PresetBuilder) -> PresetBuilder:
        _PRESETS.register(pattern, Preset(re.compile(pattern + r"\Z"), example, summary, fn),
                          fn.__module__)
        return fn

    return register


def presets() -> list[Preset]:
    """Every registered preset, in registration order (importing their modules once)."""
    return list(_PRESETS.values())


def is_preset(spec: str) -> bool:
    """Whether ``spec`` has the form of a preset name (its numbers may still be invalid)."""
    return any(entry.pattern.match(spec.strip().lower()) for entry in presets())


MAX_NAME_CHARS = 40  # of a preset name: none is longer; pod9...9 must not reach int()


def build_preset(spec: str, options: PresetOptions = PresetOptions()) -> Topology:
    """Build the preset that ``spec`` names, or raise :class:`SpecError` listing the choices."""
    name = spec.strip().lower()
    for entry in presets():
        match = entry.pattern.match(name) if len(name) <= MAX_NAME_CHARS else None
        if match:
            topology = entry.build(match, options)
            used = {t.name for t in topology.link_types}
            unknown = [name for name, _ in options.link_overrides if name not in used]
            if unknown:
                raise SpecError(
                    f"preset {spec!r} has no link type {unknown[0]!r}; its link types are "
                    f"{', '.join(sorted(used))}"
                )
            return topology
    choices = "; ".join(f"{p.example} ({p.summary})" for p in presets())
    raise SpecError(f"unknown topology {quoted(spec)}: use a preset ({choices}) or a YAML "
                    "file path")


def apply_sync(builder: TopologyBuilder, options: PresetOptions) -> None:
    """Copy sync overrides from the options onto a builder."""
    if options.sync_local_seconds is not None:
        builder.sync_local_seconds = options.sync_local_seconds
    if options.sync_global_seconds is not None:
        builder.sync_global_seconds = options.sync_global_seconds


__all__ = ["LinkOverride", "PresetOptions", "build_preset", "is_preset", "preset", "presets"]
