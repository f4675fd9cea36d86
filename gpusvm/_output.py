"""Writing output files safely: atomically for regular files, through for devices and FIFOs.

Every file gpusvm writes (model files, ``gpusvm predict --out``, study cells) goes through
:func:`write_output`; the rules are in docs/command_line.md (``--out``). A regular file is
written to a temporary file beside it, flushed and renamed over it (:func:`os.replace`): a
reader sees the old file or the complete new one. A character device or FIFO is written
through as a stream that cannot seek (``/dev/null`` accepts ``seek`` but keeps no position,
which would break a zip archive's directory), so archives are streamed.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tempfile

__all__ = ["write_output", "check_output", "file_mode"]


def file_mode() -> int:
    """``0o666 & ~umask``: permissions of a new file (``mkstemp`` alone gives 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _target(path: str, what: str):
    """``(path to write, write through?)`` for ``path``, or a ValueError for a bad target."""
    if path == "":
        raise ValueError(f"the {what} path is empty; pass a file name")
    try:
        mode = os.stat(path).st_mode            # follows symbolic links
    except FileNotFoundError:   # a new file, or a dangling link: create the file the link names
        return (os.path.realpath(path) if os.path.islink(path) else path), False
    except NotADirectoryError:
        raise ValueError(f"cannot write the {what} to {path}: a component of the path is not "
                         "a directory") from None
    if stat.S_ISREG(mode):
        return os.path.realpath(path), False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return path, True
    kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    hint = "; pass a file name" if stat.S_ISDIR(mode) else "; write to a regular file instead"
    raise ValueError(f"cannot write the {what} to {path}: it is {kind}{hint}")


def _temporary(path, target, what):
    """``(fd, name)`` of a new temporary file beside ``target``, or an OSError naming ``path``
    and the cause."""
    directory = os.path.dirname(os.path.abspath(target))
    try:
        return tempfile.mkstemp(prefix=f".{os.path.basename(target)}.{os.getpid()}.",
                                suffix=".tmp", dir=directory)
    except OSError as exc:
        cause = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno and exc.strerror else str(exc)
        error = OSError(f"cannot write the {what} to {path}: a file cannot be created in "
                        f"{directory} ({cause}); pass a path in a writable directory")
        error.errno = exc.errno
        raise error from None


def check_output(path, *, what: str = "output") -> None:
    """Refuse, before any work, an output path that :func:`write_output` would refuse.

    For a regular file or a new path, a temporary file is created beside it and removed again,
    so that a directory where nothing can be created is found before the work, not after it.
    """
    path = os.fspath(path)
    target, through = _target(path, what)
    if not through:
        fd, tmp = _temporary(path, target, what)
        os.close(fd)
        os.unlink(tmp)


class _Stream(io.RawIOBase):
    """A write-only, unseekable view of a device or FIFO; ``tell`` counts the bytes written, so
    that :mod:`zipfile` streams its archive (no seeking back) whatever the device claims."""

    def __init__(self, raw):
        super().__init__()
        self._raw = raw
        self._written = 0

    def writable(self):
        return True

    def write(self, data):
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):      # a pipe may take part of a large write
            done += self._raw.write(view[done:])
        self._written += done
        return done

    def tell(self):
        return self._written

    def flush(self):
        self._raw.flush()

    def close(self):
        if not self.closed:
            try:
                super().close()             # flushes
            finally:
                self._raw.close()


def write_output(path, write, *, what: str = "output", binary: bool = True) -> str:
    """Call ``write(f)`` on ``path`` opened in binary (or UTF-8 text) mode; return ``path``.

    ``what`` names the output in the error messages (e.g. ``"model"``). A ValueError refuses a
    bad target; an OSError from a failed write leaves the destination as it was (unless it is
    a device or FIFO written through).
    """
    path = os.fspath(path)
    target, through = _target(path, what)
    kwargs = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    if through:
        stream = io.BufferedWriter(_Stream(open(target, "wb", buffering=0)))
        with (stream if binary else io.TextIOWrapper(stream, **kwargs)) as f:
            write(f)
        return path
    fd, tmp = _temporary(path, target, what)
    try:
        with os.fdopen(fd, "wb" if binary else "w", **kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
