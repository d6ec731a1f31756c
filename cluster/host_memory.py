"""This machine's free memory: what real-mode work and a traced import are checked against.

A fact about the host, not about an emulated device, so that both the runtime
(:mod:`ipu_node`) and the pure pricing layer (:mod:`cluster.training.importers`) read it
from here without the one importing the other.
"""

from __future__ import annotations

import os
from pathlib import Path


def available_ram_bytes() -> int:
    """This machine's free memory (bytes), to refuse real-mode work that cannot fit: the
    kernel's ``MemAvailable`` (free pages and the cache it can drop), else free pages."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62
