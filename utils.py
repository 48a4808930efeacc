"""What every module shares for input and files: the error for bad input (:class:`UsageError`),
files written all or nothing (:func:`atomic_write`, :func:`probe_writable`) and JSON read back (:func:`read_json`).

Nothing here imports another module of this project.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import IO, Any, Callable


class UsageError(Exception):
    """Bad input from the user. `main` prints it as one line on stderr and exits with code 2."""


# ---------------------------------------------------------------------------------------------
# Files: atomic writes
# ---------------------------------------------------------------------------------------------
def atomic_write(path: str, write: Callable[[IO], Any], binary: bool = True) -> None:
    """Create or replace the file `path` with what `write(file)` writes, all or nothing.

    The data goes to a temporary file in the same directory, is flushed to disk, and then
    replaces `path` with one `os.replace` (atomic on POSIX and Windows).
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp makes 0600; the result is an ordinary file
        os.replace(tmp_path, path)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise


def read_json(path: str) -> Any:
    """The JSON of the file at ``path``; a one-line `UsageError` where it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None


def probe_writable(directory: str) -> None:
    """Raise ``OSError`` unless a file can be created in ``directory`` (checked before long work, not after)."""
    with tempfile.TemporaryFile(dir=directory):
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
