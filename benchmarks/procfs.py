"""Memory figures (bytes) and CPU seconds from Linux's /proc, for the benchmarks that
measure them."""

from __future__ import annotations

import os
from pathlib import Path


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def rollup_bytes(pid: int) -> dict[str, int]:
    """Resident, proportional and unique memory of process ``pid`` in bytes (``rss``,
    ``pss``: shared pages split among the processes sharing them, ``uss``: pages no
    other process maps), from /proc/PID/smaps_rollup; zeros if it is gone."""
    fields = {"Rss": 0, "Pss": 0, "Private_Clean": 0, "Private_Dirty": 0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in fields:
                fields[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return {"rss": fields["Rss"], "pss": fields["Pss"],
            "uss": fields["Private_Clean"] + fields["Private_Dirty"]}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
