"""No two modules of the project share a file name, so that a name says what it is (the
control service's server is ``control_server.py``, a device's link server
``link_server.py``) and a traceback or an editor tab is never ambiguous.

Two exceptions: ``__init__.py``, and a command's module in ``cluster/cli/``, which is
named after the command it implements (``ipupod topology`` is ``cluster/cli/topology.py``,
``ipupod trace`` ``cluster/cli/trace.py``), even where that is also the name of the module
it fronts (``cluster/model/topology.py``)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import click

from cluster.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "gcl", "ipu_node")


def _command_modules() -> set[str]:
    """The file names a top-level command's module has in cluster/cli/."""
    return {f"{name.replace('-', '_')}.py" for name in cli.list_commands(click.Context(cli))}


def shared_names(paths: list[str], commands: set[str]) -> dict[str, list[str]]:
    """The file names that more than one of ``paths`` has, but for ``__init__.py`` and a
    command's module in cluster/cli/ (one of ``commands``)."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        if name != "__init__.py" and not (path.startswith("cluster/cli/") and name in commands):
            by_name[name].append(path)
    return {name: sorted(found) for name, found in by_name.items() if len(found) > 1}


def test_no_two_modules_share_a_file_name():
    paths = [str(path.relative_to(ROOT)) for package in PACKAGES
             for path in (ROOT / package).rglob("*.py")]
    assert len(paths) > 100
    assert shared_names(paths, _command_modules()) == {}


def test_a_shared_name_is_found_and_only_the_exceptions_pass():
    commands = _command_modules()
    assert {"topology.py", "trace.py", "bench.py"} <= commands
    assert shared_names(["cluster/service/server.py", "ipu_node/links/server.py",
                         "cluster/__init__.py", "gcl/__init__.py",
                         "cluster/cli/topology.py", "cluster/model/topology.py"],
                        commands) == {"server.py": ["cluster/service/server.py",
                                                    "ipu_node/links/server.py"]}
    assert shared_names(["cluster/cli/output.py", "gcl/output.py"], commands) == {
        "output.py": ["cluster/cli/output.py", "gcl/output.py"]}
