"""Memory figures from Linux's /proc, for the benchmarks that measure it (bytes)."""

from __future__ import annotations

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
