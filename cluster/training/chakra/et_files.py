"""Which files make a Chakra trace, and each one's rank. A trace is named as a folder
(its files named ``NAME.RANK.et``, or ``.et.gz``), a file pattern (``traces/step.*.et``),
a prefix as ASTRA-sim takes it (``traces/step`` for ``traces/step.0.et`` ...) or a single
file (one rank, rank 0). The ranks must be 0 to N-1, each once."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from cluster.errors import quoted
from cluster.model.units import ranges
from cluster.training.chakra.et_errors import ChakraTraceError
from cluster.training.chakra.et_limits import TraceLimits

RANK_NAME = re.compile(r"^.*\.(?P<rank>[0-9]{1,9})\.et(\.gz)?$")
GLOB_CHARACTERS = set("*?[")


def rank_files(source: str, limits: TraceLimits) -> tuple[Path, ...]:
    """The files of the trace ``source`` names, in rank order (rank i is the i-th)."""
    if GLOB_CHARACTERS & set(source):
        return _by_rank(source, sorted(glob.glob(source)), limits, "matches")
    if os.path.isdir(source):
        names = sorted(os.path.join(source, entry.name) for entry in _entries(source))
        return _by_rank(source, [n for n in names if RANK_NAME.match(os.path.basename(n))],
                        limits, "holds")
    if os.path.lexists(source):
        return (Path(source),)
    pattern = glob.escape(source) + ".*.et"
    found = sorted({*glob.glob(pattern), *glob.glob(pattern + ".gz")})
    if not found:
        raise ChakraTraceError(source, "no such file or folder, and no files "
                               "PATH.RANK.et (or .et.gz) start with it")
    return _by_rank(source, found, limits, "starts")


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as entries:
            return list(entries)
    except OSError as error:
        raise ChakraTraceError(folder, f"cannot be listed: {error.strerror or error}") from None


def _by_rank(source: str, paths: list[str], limits: TraceLimits, verb: str) -> tuple[Path, ...]:
    """``paths`` ordered by the rank in each name; refused when one has no rank, two have
    the same, a rank is missing, or there are more than ``limits.max_ranks``."""
    if not paths:
        raise ChakraTraceError(source, f"{verb} no rank "
                               "files (named NAME.RANK.et or NAME.RANK.et.gz)")
    if len(paths) > limits.max_ranks:
        raise ChakraTraceError(source, f"{verb} {len(paths):,} files, more than the limit of "
                               f"{limits.max_ranks:,} ranks")
    by_rank: dict[int, str] = {}
    for path in paths:
        match = RANK_NAME.match(os.path.basename(path))
        if match is None:
            raise ChakraTraceError(path, "has no rank in its name (NAME.RANK.et or "
                                   "NAME.RANK.et.gz)")
        rank = int(match["rank"])
        if rank in by_rank:
            raise ChakraTraceError(source, f"two files hold rank {rank}: "
                                   f"{quoted(by_rank[rank])} and {quoted(path)}")
        by_rank[rank] = path
    missing = sorted(set(range(len(by_rank))) - set(by_rank))
    if missing:
        raise ChakraTraceError(source, f"rank {missing[0]} has no file: the files hold ranks "
                               f"{ranges(sorted(by_rank))}, and a trace's ranks are 0 to N-1")
    return tuple(Path(by_rank[rank]) for rank in range(len(by_rank)))
