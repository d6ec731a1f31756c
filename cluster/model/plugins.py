"""Registries filled by importing modules (presets, collective algorithms), loaded once on
first use so that adding one is a new module plus its name in the registry's list."""

from __future__ import annotations

import importlib


class PluginModules:
    """The modules whose import registers the plugins of one registry."""

    def __init__(self, *modules: str) -> None:
        self._modules = modules
        self._loaded = False

    def load(self) -> None:
        """Import every module, the first time only."""
        if not self._loaded:
            for module in self._modules:
                importlib.import_module(module)
            self._loaded = True
