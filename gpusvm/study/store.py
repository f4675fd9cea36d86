"""Resumable storage of study cells: one JSON file per finished cell, written atomically.

A *cell* is one unit of work (e.g. one ``(method, b, seed)`` of a scaling study); its key
hashes every parameter its result depends on, and it is written through a temporary file and
:func:`os.replace` (docs/studies.md, "Resuming").  Every cell carries the sha256 of its content
(``checksum``): one edited or damaged is recomputed, with a warning.  A study holds an
exclusive lock on its directory (:func:`study_lock`) while it runs, so that two studies never
write the same cells at once.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np

from .._output import write_output

__all__ = ["cell_key", "write_json_atomic", "CellStore", "study_lock", "locked_study"]

#: bump when the content or the meaning of a cell changes (2: BLAS limited to one thread;
#: 3: checksums, and keys name the P* cell instead of holding its value)
CELL_FORMAT = 3

#: a temporary file this old is stale even when a process with its writer's id exists
STALE_SECONDS = 3600.0

LOCK_NAME = ".gpusvm-study.lock"


def _utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False,
                      default=_json_default)


def _json_default(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def cell_key(prefix: str, params: dict) -> str:
    """``prefix`` (``[A-Za-z0-9._-]``) plus 16 hex digits of the hash of ``params`` (finite JSON)."""
    if not prefix or any(not (c.isalnum() or c in "._-") for c in prefix):
        raise ValueError("a cell prefix may hold only letters, digits, '.', '_' and '-', "
                         f"got {prefix!r}")
    digest = hashlib.sha256(_canonical({"format": CELL_FORMAT, **params}).encode()).hexdigest()
    return f"{prefix}-{digest[:16]}"


def sanitize(obj):
    """``obj`` with non-finite floats replaced by None, recursively (JSON has no NaN/inf)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return sanitize(obj.item()) if isinstance(obj, np.generic) else obj


def write_json_atomic(path, obj, *, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON to ``path`` (its directory must exist) atomically; NaN/inf as null."""
    write_text_atomic(path, json.dumps(sanitize(obj), indent=indent, allow_nan=False,
                                       default=_json_default) + "\n")


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (:func:`gpusvm._output.write_output`)."""
    write_output(path, lambda f: f.write(text), what="study output", binary=False)


def checksum(cell: dict) -> str:
    """sha256 (64 hex digits) of a sanitized cell's content: every field but ``checksum``."""
    body = {k: v for k, v in cell.items() if k != "checksum"}
    return hashlib.sha256(_canonical(body).encode()).hexdigest()


def _stale(tmp: Path) -> bool:
    """Whether a temporary file was left by a writer that is gone (or is an hour old)."""
    try:
        if time.time() - tmp.stat().st_mtime > STALE_SECONDS:
            return True
        os.kill(int(tmp.name.split(".")[-3]), 0)       # .<name>.<pid>.<random>.tmp
    except ProcessLookupError:
        return True
    except (OSError, IndexError, ValueError):   # no file, no pid, or another user's process
        pass
    return False


class CellStore:
    """The ``cells/`` directory of the study directory ``out_dir`` (created when missing).

    Creating the store deletes the ``*.tmp`` files of an interrupted run whose writer is gone
    or that are an hour old.  A cell file that cannot be parsed, or does not match its
    checksum (then with a warning), is treated as missing and recomputed.
    """

    def __init__(self, out_dir) -> None:
        self.dir = Path(out_dir) / "cells"
        self.dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.dir.glob(".*.tmp"):
            if _stale(leftover):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def path(self, key: str) -> Path:
        """File of the cell ``key``."""
        return self.dir / f"{key}.json"

    def load(self, key: str) -> dict | None:
        """The stored cell, or None when it is not finished, unreadable or altered."""
        p = self.path(key)
        try:
            cell = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        if not (isinstance(cell, dict) and cell.get("key") == key):
            return None
        try:
            intact = cell.get("checksum") == checksum(cell)
        except (TypeError, ValueError):
            intact = False
        if not intact:
            warnings.warn(f"the study cell {p} does not match its checksum (it was edited or "
                          "damaged); it is computed again", UserWarning, stacklevel=2)
            return None
        return cell

    def save(self, cell: dict) -> Path:
        """Write a finished cell (it must hold its ``key``) with its checksum, atomically; its path."""
        p = self.path(cell["key"])
        clean = sanitize(cell)
        clean["checksum"] = checksum(clean)
        write_json_atomic(p, clean)
        return p


_HELD: dict = {}


@contextlib.contextmanager
def study_lock(out_dir):
    """Hold the exclusive lock of the study directory ``out_dir`` (created; re-entrant).

    An ``flock`` on ``out_dir/.gpusvm-study.lock``, released by the operating system when its
    process ends, however it ends (none without ``fcntl``: Windows).  RuntimeError when another
    process holds it.
    """
    try:
        import fcntl  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        yield
        return
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lock_path = out / LOCK_NAME
    key = (os.path.realpath(lock_path), os.getpid())
    if key in _HELD:
        _HELD[key][1] += 1
        try:
            yield
        finally:
            _HELD[key][1] -= 1
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        finally:
            os.close(fd)
        raise RuntimeError(
            f"the study directory {out} is in use by another study (process {holder}); wait "
            "for it to finish, or pass another output directory") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = [fd, 1]
    try:
        yield
    finally:
        del _HELD[key]
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def locked_study(fn):
    """Decorator: run ``fn`` holding :func:`study_lock` on its keyword ``out_dir`` (None: unlocked)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out_dir = kwargs.get("out_dir")
        with contextlib.nullcontext() if out_dir is None else study_lock(out_dir):
            return fn(*args, **kwargs)
    return wrapper


def iteration_cap(n: int, b: int, max_epochs: float | None, max_iter: int | None) -> int:
    """Iteration cap of a cell: ``min(max_iter, ceil(max_epochs n / b))`` (None: no such cap)."""
    caps = []
    if max_epochs is not None:
        caps.append(max(1, int(math.ceil(max_epochs * n / b))))
    if max_iter is not None:
        caps.append(int(max_iter))
    if not caps:
        raise ValueError("give max_epochs or max_iter: every cell needs an iteration cap")
    return min(caps)
