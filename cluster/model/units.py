"""Units: every quantity in this project carries its unit in its name.

Bandwidths are bytes per second (``*_Bps``), times are seconds (``*_s`` / ``*_seconds``),
sizes are bytes. Link speeds quoted by vendors in decimal units (100 Gbps, 64 GB/s) use
powers of 1000; message sizes typed by users (``-b 1M``) use powers of 1024, as nccl-tests
does.
"""

from __future__ import annotations

import re

from cluster.errors import UserError, quoted

MB = 1000**2
GB = 1000**3
KiB = 1024
MiB = 1024**2
GiB = 1024**3

Gbps = GB / 8  # one gigabit per second, in bytes per second

NANOSECOND = 1e-9

_SIZE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([kKmMgGtT]?)(i?[bB])?\s*$")
MAX_SIZE_BYTES = 1 << 62  # far beyond any POD's memory; keeps sizes in int64
_SIZE_FACTOR = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024**4}


def parse_size(text: str | int) -> int:
    """Parse a byte count such as ``8``, ``64K``, ``1M``, ``2G`` (suffixes are powers of 1024).

    >>> parse_size("64K")
    65536
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise UserError(
                f"cannot read the size {quoted(text)}: write a whole number of bytes with an "
                "optional K, M or G suffix (powers of 1024), e.g. 8, 64K, 1M, 2G"
            )
        number, suffix = float(match.group(1)), match.group(2).lower()
        value_float = number * _SIZE_FACTOR[suffix]
        if value_float > MAX_SIZE_BYTES:
            raise UserError(f"the size {quoted(text)} is too large: at most 2^62 bytes")
        if value_float != int(value_float):
            raise UserError(f"the size {quoted(text)} is not a whole number of bytes")
        value = int(value_float)
    if value < 0:
        raise UserError(f"the size {quoted(text)} is negative: sizes are byte counts, 0 or more")
    if value > MAX_SIZE_BYTES:
        raise UserError(f"the size {quoted(text)} is too large: at most 2^62 bytes")
    return value


def format_size(nbytes: float) -> str:
    """Render a byte count with a binary suffix: ``65536 -> '64K'``, ``1536 -> '1.5K'``."""
    for suffix, factor in (("G", GiB), ("M", MiB), ("K", KiB)):
        if nbytes >= factor:
            value = nbytes / factor
            return f"{value:g}{suffix}"
    return f"{nbytes:g}"


def format_flops(flops: float) -> str:
    """A FLOP count in the SI unit that keeps it at 1 or more: ``43520 -> '43.520 kFLOPs'``,
    ``8.28e9 -> '8.280 GFLOPs'``, ``20 -> '20 FLOPs'``."""
    for prefix, factor in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= factor:
            return f"{flops / factor:.3f} {prefix}FLOPs"
    return f"{flops:g} FLOPs"


def plural(count: int, noun: str) -> str:
    """``'1 IPU'``, ``'2 IPUs'``: a count and its noun, in the right number."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 3, 8, 9, 11]`` as ``'0-3,8-9,11'``: IPU lists that stay short."""
    parts: list[str] = []
    start = previous = None
    for number in [*numbers, None]:
        if start is not None and number is not None and previous is not None \
                and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    return ",".join(parts)
