"""The walk of ``ipupod train --model``: where the model's name is read, room by room.

Runs one phantom ``ipupod train --model bert-large --steps 1 --json`` in this process
(after one unmeasured run, so that imports and the built-in registry's own uses of the
name are not counted) under :func:`sys.setprofile` and notes every call into this
repository's code (``cluster``, ``gcl``, ``ipu_node``) that is handed the model's name as
an argument: each is a place that reads the text again. Their packages, in call order,
are the walk; a *room* is a package (``cluster.cli``, ``cluster.training.workloads``), a
*move* a step from one room to another, a *climb back* a move into a room the walk has
already left (the text carried down, then up again to be read once more). A run
resolved once would read the name at the edge and go down without climbing back.

    .venv/bin/python benchmarks/train_walk.py            # rooms, moves, climbs, the walk
    .venv/bin/python benchmarks/train_walk.py --json
    .venv/bin/python benchmarks/train_walk.py --model gpt2-xl --topology pod64
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "gcl", "ipu_node")
SHOWN = 16  # rooms of the walk printed as text (--json has them all)


def _room(frame: FrameType) -> str | None:
    """The package of the repository's module running ``frame``; None outside it."""
    path = Path(frame.f_code.co_filename)
    try:
        parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    except ValueError:
        return None
    if not parts or parts[0] not in PACKAGES:
        return None
    return ".".join(parts[:-1]) or parts[0]


def _arguments(frame: FrameType) -> list[Any]:
    """The values ``frame``'s function was called with (positional and keyword)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    return [frame.f_locals.get(name) for name in code.co_varnames[:count]]


def walk(model: str, extra: list[str]) -> list[tuple[str, str]]:
    """(room, function) of each call handed ``model`` during one phantom train."""
    from cluster.cli.main import cli

    seen: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        room = _room(frame)
        if room is not None and any(value == model for value in _arguments(frame)
                                    if isinstance(value, str)):
            seen.append((room, frame.f_code.co_name))

    argv = ["train", "--model", model, "--mode", "phantom", "--steps", "1", "--json", *extra]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(argv, prog_name="ipupod", standalone_mode=False)  # imports and registries
        sys.setprofile(profile)
        try:
            cli.main(argv, prog_name="ipupod", standalone_mode=False)
        finally:
            sys.setprofile(None)
    return seen


def measure(calls: list[tuple[str, str]]) -> dict[str, Any]:
    """Rooms, moves between them and climbs back into a room already left."""
    path = [room for i, (room, _) in enumerate(calls) if i == 0 or calls[i - 1][0] != room]
    left: set[str] = set()
    climbs = 0
    for previous, room in itertools.pairwise(path):
        left.add(previous)
        climbs += room in left
    return {"rooms": len(set(path)), "moves": max(len(path) - 1, 0), "climbs_back": climbs,
            "reads": len(calls), "walk": path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-large")
    parser.add_argument("--topology", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extra = [] if args.topology is None else ["--topology", args.topology]
    calls = walk(args.model, extra)
    found = measure(calls)
    if args.json:
        print(json.dumps({**found, "calls": [f"{room}:{name}" for room, name in calls]},
                         indent=2))
        return
    print(f"# ipupod train --model {args.model} --mode phantom --steps 1: the model's name "
          f"read {found['reads']} times")
    print(f"rooms {found['rooms']}, moves {found['moves']}, climbs back {found['climbs_back']}")
    shown = found["walk"][:SHOWN]
    more = len(found["walk"]) - len(shown)
    print("walk: " + " -> ".join(shown) + (f" -> ... ({more} more)" if more else ""))


if __name__ == "__main__":
    main()
