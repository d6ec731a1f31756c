"""The path type of every option that names a file or folder: click's, which also refuses,
as a usage error, a path no file can have (empty, a NUL byte, a name too long for the
file system). Without it click lets such a path through, or fails with a traceback, and the
command's first look at the disk would. And the check of an output option's folder."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any

import click

from cluster.errors import UserError, quoted


class CheckedPath(click.Path):
    """:class:`click.Path`, refusing a path the operating system cannot even look up."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        """The path, as click converts it; click's usage error for an impossible one (an
        empty path too, which click would turn into the current folder)."""
        if isinstance(value, (str, bytes)):
            if not value:  # click would take it for the current folder
                name = (param.opts[0] if isinstance(param, click.Option)
                        else param.human_readable_name if param else "the path")
                raise UserError(f"{name} '': an empty path names no file: give a path")
            try:
                os.stat(value)
            except ValueError:  # a NUL byte
                self.fail(f"{quoted(value)} cannot be a path (it holds a NUL byte)", param, ctx)
            except OSError as error:
                if error.errno == errno.ENAMETOOLONG:
                    self.fail(f"{quoted(value)}: {error.strerror}", param, ctx)
        return super().convert(value, param, ctx)


def check_output_folder(path: Path, option: str) -> None:
    """Refuse, before anything is written, an output ``path`` whose folder is missing or
    where no file can be made: the output options write only where asked, never making
    folders on the way (a mistyped ``/nonexist/x`` would leave ``/nonexist`` behind)."""
    folder = path.parent
    if not folder.is_dir():
        missing = "does not exist" if not os.path.lexists(folder) else "is not a folder"
        raise UserError(f"{option} {quoted(str(path))}: the folder {quoted(str(folder))} "
                        f"{missing}; make it or choose another path")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(f"{option} {quoted(str(path))}: cannot write in "
                        f"{quoted(str(folder))} ({error.strerror or error}); choose another "
                        "path") from None
