"""Where a report is written: its ``--out`` folder, checked before any run and left
as it was found when the report fails."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from cluster.errors import UserError, quoted
from cluster.training.reports.document import is_report


@contextmanager
def report_folder(folder: Path) -> Iterator[None]:
    """:func:`_check_writable`, then the report's work; the folders made here (``--out``
    and any missing parents) are removed again, if still empty, when that work fails, so
    a mistake leaves nothing behind."""
    made = [path for path in (folder, *folder.parents) if not path.exists()]
    try:
        _check_writable(folder)
        yield
    except BaseException:
        for path in made:  # innermost first; only an empty folder goes
            with suppress(OSError):
                path.rmdir()
        raise


def _check_writable(folder: Path) -> None:
    """Make ``folder`` if missing and check a file can be written there, or a UserError;
    a folder whose README.md no ipupod report wrote (:func:`~cluster.training.reports.
    document.is_report`) is refused (the report would overwrite it: ``--out ''`` is the
    working directory)."""
    readme = folder / "README.md"
    if readme.is_file() and not is_report(readme):
        raise UserError(f"{quoted(str(readme))} exists and is not an ipupod report: the "
                        "report would overwrite it; choose another --out folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UserError(f"cannot write the report to {quoted(str(folder))}: "
                        f"{error.strerror or error}; choose another --out folder") from None
