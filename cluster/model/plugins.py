"""Registries of named plugins: collective algorithms, topology presets, pipeline schedules,
built-in workloads and link transports all register the same way.

A plugin is a module in its registry's package that registers its entries when imported
(usually with a decorator). The registry finds its modules by walking that package on
first use, so there is no list of module names to keep (and forget); every registration is
checked (a name given once, an entry of the right kind), so a mistake fails at import, and
``tests/test_registries.py`` imports every module of every plugin package and asserts it
registered something.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class Registry(Mapping[str, T]):
    """Entries of one kind by name, filled by importing every module of ``package``.

    ``check(entry)`` raises ``TypeError`` for an entry of the wrong kind; ``order(entry)``
    sorts the entries (default: the modules' alphabetical order and, within a module, the
    order of its registrations, whichever module was imported first). Reading the registry
    (``registry[name]``, ``name in registry``, iterating) loads the modules first.
    """

    def __init__(self, kind: str, package: str, *, check: Callable[[T], None] | None = None,
                 order: Callable[[T], Any] | None = None) -> None:
        self.kind = kind
        self.package = package
        self._check = check
        self._order = order
        self._entries: dict[str, T] = {}
        self._origins: dict[str, str] = {}
        self._loaded = False
        self._module_rank: dict[str, int] = {}

    def register(self, name: str, entry: T, origin: str) -> T:
        """Add ``entry`` under ``name``, registered by module ``origin``; a ``ValueError``
        for an empty or repeated name, a ``TypeError`` for an entry of the wrong kind."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind}'s name is a non-empty string, not {name!r}")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice: registered already "
                             f"by {self._origins[name]}, again by {origin}")
        if self._check is not None:
            self._check(entry)
        self._entries[name] = entry
        self._origins[name] = origin
        return entry

    def modules(self) -> list[str]:
        """The plugin package's modules (not the package itself), sorted."""
        package = importlib.import_module(self.package)
        return sorted(f"{self.package}.{info.name}"
                      for info in pkgutil.iter_modules(package.__path__))

    def load(self) -> None:
        """Import every module of the package, the first time only."""
        if not self._loaded:
            modules = self.modules()
            for module in modules:
                importlib.import_module(module)
            self._module_rank = {module: rank for rank, module in enumerate(modules)}
            self._loaded = True

    def registered_by(self, module: str) -> list[str]:
        """The names that ``module`` registered (after loading every module)."""
        self.load()
        return [name for name, origin in self._origins.items() if origin == module]

    def unregistered(self) -> list[str]:
        """The package's modules that registered nothing: a plugin whose registration was
        forgotten (a registry's helper modules start with ``_``, and are skipped)."""
        self.load()
        return [module for module in self.modules()
                if not module.rsplit(".", 1)[1].startswith("_")
                and module not in self._origins.values()]

    def _sorted(self) -> list[str]:
        self.load()
        if self._order is None:  # the modules' order, whichever was imported first
            last = len(self._module_rank)
            return sorted(self._entries,
                          key=lambda name: self._module_rank.get(self._origins[name], last))
        order = self._order
        return sorted(self._entries, key=lambda name: order(self._entries[name]))

    def __getitem__(self, name: str) -> T:
        self.load()
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sorted())

    def __len__(self) -> int:
        self.load()
        return len(self._entries)

