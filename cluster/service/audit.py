"""The audit log of a shared POD: one JSON line per state-changing or refused call.

Each line holds the time (UTC, ISO 8601), the user, the call, its target (a partition,
card, link or user name), the outcome (``ok`` or the status code's name) and, for a
refusal, the message. Never a credential: nothing of the request's metadata is written.
The file is mode 0600 and bounded: past ``max_bytes`` it is rotated (``FILE.1`` ... up to
``backups`` old files; :class:`logging.handlers.RotatingFileHandler`).
"""

from __future__ import annotations

import io
import json
import logging
import os
import threading
from datetime import datetime, timezone
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from cluster.errors import UserError

MAX_BYTES = 4 << 20   # per file
BACKUPS = 3           # old files kept


class _PrivateRotatingFile(RotatingFileHandler):
    """A rotating handler whose files are created mode 0600."""

    def _open(self) -> io.TextIOWrapper:
        descriptor = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        raw = io.BufferedWriter(io.FileIO(descriptor, "a"))
        return io.TextIOWrapper(raw, encoding=self.encoding)


class AuditLog:
    """Writes audit lines to ``path`` (thread-safe); with no path, writes nothing."""

    def __init__(self, path: Path | None, max_bytes: int = MAX_BYTES,
                 backups: int = BACKUPS) -> None:
        self.path, self._sizes = path, (max_bytes, backups)
        self._lock = threading.Lock()
        self._handler = self._open(path)

    def _open(self, path: Path | None) -> logging.Handler | None:
        """A handler writing to ``path`` (None: no path, nothing written)."""
        if path is None:
            return None
        max_bytes, backups = self._sizes
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handler = _PrivateRotatingFile(path, maxBytes=max_bytes, backupCount=backups,
                                           encoding="utf-8")
        except OSError as error:
            raise UserError(f"cannot write the audit log {path} ({error.strerror}): "
                            "choose another --audit-log") from None
        handler.setFormatter(logging.Formatter("%(message)s"))
        return handler

    def reopen(self, path: Path) -> None:
        """Write to ``path`` from now on (the file written so far is closed)."""
        handler = self._open(path)
        with self._lock:
            previous, self._handler, self.path = self._handler, handler, path
        if previous is not None:
            previous.close()

    def record(self, user: str, call: str, target: str, outcome: str,
               detail: str = "") -> None:
        """Write one line: who did what to what, and how it ended."""
        if self._handler is None:
            return
        line: dict[str, Any] = {
            "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "user": user, "call": call, "target": target, "outcome": outcome}
        if detail:
            line["detail"] = detail
        entry = logging.LogRecord("ipupod.audit", logging.INFO, __file__, 0,
                                  json.dumps(line), None, None)
        with self._lock:
            if self._handler is not None:
                self._handler.handle(entry)

    def close(self) -> None:
        """Flush and close the file."""
        if self._handler is not None:
            self._handler.close()
