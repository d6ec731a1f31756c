"""The walk of ``ipupod train --model``: where the model's name is read, room by room.

Runs one phantom ``ipupod train --model bert-large --steps 1 --json`` in this process
(after one unmeasured run, so that imports and the built-in registry's own uses of the
name are not counted) under :func:`sys.setprofile` and notes every call into this
repository's code (``cluster``, ``gcl``, ``ipu_node``) that is handed the model's name as
an argument, and every read of the text a
:class:`~cluster.training.model_ref.ModelRef` carries (its ``text``, read by this
repository's code): each is a place that reads the text again. Their packages, in call
order, are the walk; a *room* is a package (``cluster.cli``, ``cluster.training.workloads``), a
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
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "gcl", "ipu_node")
SHOWN = 16  # rooms of the walk printed as text (--json has them all)
CALL, TEXT = "call", "text"  # handed the name as an argument; read it off a ModelRef
Read = tuple[str, str, str]  # (room, function, CALL or TEXT)


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


@contextlib.contextmanager
def text_reads(seen: list[Read]) -> Iterator[None]:
    """While inside, each read of a ``ModelRef``'s ``text`` by this repository's code
    notes (room, function, TEXT) of the reader in ``seen``: the text carried in a typed
    value is still the text."""
    from cluster.training.model_ref import ModelRef

    def read(ref: ModelRef) -> str:
        reader = sys._getframe(1)
        room = _room(reader)
        if room is not None:
            seen.append((room, reader.f_code.co_name, TEXT))
        return str(ref.__dict__["text"])

    def write(ref: ModelRef, text: str) -> None:
        ref.__dict__["text"] = text

    ModelRef.text = property(read, write)  # type: ignore[assignment]  # every read, seen
    try:
        yield
    finally:
        delattr(ModelRef, "text")


def walk(model: str, extra: list[str]) -> list[Read]:
    """(room, function, how) of each call handed ``model`` (CALL), or reading it from the
    typed value that carries it (TEXT), during one phantom train."""
    from cluster.cli.main import cli

    seen: list[Read] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        room = _room(frame)
        if room is not None and any(value == model for value in _arguments(frame)
                                    if isinstance(value, str)):
            seen.append((room, frame.f_code.co_name, CALL))

    argv = ["train", "--model", model, "--mode", "phantom", "--steps", "1", "--json", *extra]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli.main(argv, prog_name="ipupod", standalone_mode=False)  # imports and registries
        with text_reads(seen):
            sys.setprofile(profile)
            try:
                cli.main(argv, prog_name="ipupod", standalone_mode=False)
            finally:
                sys.setprofile(None)
    return seen


def measure(calls: list[Read]) -> dict[str, Any]:
    """Rooms, moves between them and climbs back into a room already left."""
    path = [room for i, (room, _, _) in enumerate(calls)
            if i == 0 or calls[i - 1][0] != room]
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
    handed = measure([read for read in calls if read[2] == CALL])
    if args.json:
        print(json.dumps({**found, "calls": [f"{room}:{name} ({how})"
                                             for room, name, how in calls],
                          "handed_only": handed}, indent=2))
        return
    print(f"# ipupod train --model {args.model} --mode phantom --steps 1: the model's name "
          f"read {found['reads']} times")
    print(f"rooms {found['rooms']}, moves {found['moves']}, climbs back {found['climbs_back']}")
    shown = found["walk"][:SHOWN]
    more = len(found["walk"]) - len(shown)
    print("walk: " + " -> ".join(shown) + (f" -> ... ({more} more)" if more else ""))
    print(f"handed the name as an argument only (the measure before a typed value carried "
          f"it): read {handed['reads']} times, rooms {handed['rooms']}, moves "
          f"{handed['moves']}, climbs back {handed['climbs_back']}")


if __name__ == "__main__":
    main()
