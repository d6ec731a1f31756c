"""Opening a file a person named: only a regular file is read, and nothing blocks on the
way (a FIFO with no writer would hold ``open`` for ever)."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading (binary) if it is a regular file. Otherwise an
    ``OSError`` whose ``strerror`` says what it is instead ("Is a directory", "Not a
    regular file (a FIFO, socket or device)") or why it cannot be opened, so callers' usual
    ``except OSError`` names it; a path with a NUL byte is ``ValueError``, as for ``open``.
    The open does not wait for a FIFO's writer; the file is checked after it is opened, on
    what was opened."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "Not a regular file (a FIFO, socket or device)",
                          str(path))
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise
