"""Files appear complete or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> str:
    """Call ``write(tmp_path)`` on a temporary file beside ``path``, then rename it into place.

    On any failure (including Ctrl-C) the temporary file is removed and ``path`` is untouched.
    The file gets the usual permissions for new files (0666 less the umask).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"cannot write {path!r}: directory {directory!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=directory)
    os.close(fd)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
