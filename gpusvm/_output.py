"""Writing output files safely: atomically for regular files, through for devices and FIFOs.

Every file gpusvm writes (model files, ``gpusvm predict --out``, study cells)
goes through :func:`write_output`:

* a new path or an existing regular file is written to a temporary file in the
  same directory, flushed to disk and renamed over the destination with
  :func:`os.replace`: a reader sees the old file or the complete new one,
  never half a file, and a failed write (a full disk) leaves the old file as
  it was;
* a symbolic link is followed: the file it points to is replaced and the link
  stays a link;
* a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe)
  is written through, as ``>`` in a shell would, never replaced by a
  regular file; the writer sees a stream it cannot seek (``/dev/null`` accepts
  ``seek`` but keeps no position, which would break a zip archive's directory),
  so archives are streamed;
* a path whose directory cannot hold a new file (``/proc/version``, a
  read-only directory) is refused before any work, with the cause;
* a directory, a block device or a socket is refused with a ``ValueError``.

New files get the permissions ``0666`` minus the umask, like any file a
program creates.
"""

from __future__ import annotations

import io
import os
import stat
import tempfile

__all__ = ["write_output", "check_output", "file_mode"]


def file_mode() -> int:
    """Permissions of a new file under the current umask (``mkstemp`` alone gives 0600).

    Returns
    -------
    int
        ``0o666 & ~umask``.
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _target(path: str, what: str):
    """``(path to write, write through?)`` for ``path``, or a ValueError for a bad target."""
    if path == "":
        raise ValueError(f"the {what} path is empty; pass a file name")
    try:
        st = os.stat(path)                      # follows symbolic links
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise ValueError(f"cannot write the {what} to {path}: a component of the path is not "
                         "a directory") from None
    if st is None:
        # a new file, or a dangling symbolic link: create the file the link names
        return (os.path.realpath(path) if os.path.islink(path) else path), False
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return os.path.realpath(path), False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return path, True
    kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    hint = "; pass a file name" if stat.S_ISDIR(mode) else "; write to a regular file instead"
    raise ValueError(f"cannot write the {what} to {path}: it is {kind}{hint}")


def _uncreatable(path, what, directory, exc) -> OSError:
    """The error of a temporary file that cannot be made beside ``path``: target and cause."""
    cause = f"[Errno {exc.errno}] {exc.strerror}" if exc.errno and exc.strerror else str(exc)
    error = OSError(f"cannot write the {what} to {path}: a file cannot be created in "
                    f"{directory} ({cause}); pass a path in a writable directory")
    error.errno = exc.errno
    return error


def _temporary(path, target, what):
    """``(fd, name)`` of a new temporary file beside ``target``, or an error naming ``path``."""
    directory = os.path.dirname(os.path.abspath(target))
    try:
        return tempfile.mkstemp(prefix=f".{os.path.basename(target)}.{os.getpid()}.",
                                suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _uncreatable(path, what, directory, exc) from None


def check_output(path, *, what: str = "output") -> None:
    """Refuse, before any work, an output path that :func:`write_output` would refuse.

    For a regular file or a new path, a temporary file is created beside it and
    removed again, so that a directory where nothing can be created is found
    before the work, not after it.

    Parameters
    ----------
    path : str or os.PathLike
    what : str, default="output"
        What will be written, for the error message.

    Raises
    ------
    ValueError
        When ``path`` is empty, a directory, a block device or a socket.
    OSError
        When no file can be created in the directory of ``path`` (the message
        names ``path`` and the cause).
    """
    path = os.fspath(path)
    target, through = _target(path, what)
    if not through:
        fd, tmp = _temporary(path, target, what)
        os.close(fd)
        os.unlink(tmp)


class _Stream(io.RawIOBase):
    """A write-only, unseekable view of a file written through (a device or a FIFO).

    ``tell`` counts the bytes written, so that :mod:`zipfile` writes a streamed
    archive (data descriptors, no seeking back) whatever the device claims.
    """

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


def _open_through(target, binary):
    """``target`` (a device or a FIFO) opened for writing as an unseekable stream."""
    stream = io.BufferedWriter(_Stream(open(target, "wb", buffering=0)))
    if binary:
        return stream
    return io.TextIOWrapper(stream, encoding="utf-8", newline="\n")


def write_output(path, write, *, what: str = "output", binary: bool = True) -> str:
    """Write a file by calling ``write(f)`` on an open file object, safely.

    Parameters
    ----------
    path : str or os.PathLike
        Destination; see the module docstring for links, devices and FIFOs.
    write : callable
        ``write(f)`` writes the content to the file object ``f``.
    what : str, default="output"
        What is written, for the error messages (e.g. ``"model"``).
    binary : bool, default=True
        Open the file in binary mode (else UTF-8 text).

    Returns
    -------
    str
        The path as given.

    Raises
    ------
    ValueError
        When ``path`` is empty, a directory, a block device or a socket.
    OSError
        When writing fails (the destination is then left as it was, unless it
        is a device or a FIFO written through), or when no file can be created
        in the directory of ``path`` (the message names ``path`` and the cause).
    """
    path = os.fspath(path)
    target, through = _target(path, what)
    kwargs = {} if binary else {"encoding": "utf-8", "newline": "\n"}
    flag = "wb" if binary else "w"
    if through:
        with _open_through(target, binary) as f:
            write(f)
        return path
    fd, tmp = _temporary(path, target, what)
    try:
        with os.fdopen(fd, flag, **kwargs) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, file_mode())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
