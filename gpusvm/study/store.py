"""Resumable storage of study cells: one JSON file per finished cell, written atomically.

A *cell* is one unit of work (e.g. one ``(method, b, seed)`` of a scaling
study).  Its key is a readable prefix plus the sha256 of every parameter that
can change its result (the data fingerprint, ``lam``, ``eps``, ``P*``, the caps,
the search settings, the format version), so a rerun with any other setting
never reuses it.  A finished cell is written to a temporary file in the same
directory and renamed over its final name with :func:`os.replace`, which is
atomic on POSIX and Windows: an interrupted run leaves either the complete
file or none (plus, at worst, a ``*.tmp`` file that the next run deletes).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path

__all__ = ["cell_key", "write_json_atomic", "CellStore"]

#: bump when the content or the meaning of a cell changes (2: BLAS limited to one thread)
CELL_FORMAT = 2


def _canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False,
                      default=_json_default)


def _json_default(obj):
    import numpy as np  # noqa: PLC0415
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")


def cell_key(prefix: str, params: dict) -> str:
    """Key of a cell: ``prefix`` plus 16 hex digits of the hash of ``params``.

    Parameters
    ----------
    prefix : str
        Readable part, e.g. ``"sdca-safe-b64-s0"`` (only ``[A-Za-z0-9._-]``).
    params : dict
        Every setting the result depends on (JSON-serialisable, finite floats).

    Returns
    -------
    str
    """
    if not prefix or any(not (c.isalnum() or c in "._-") for c in prefix):
        raise ValueError("a cell prefix may hold only letters, digits, '.', '_' and '-', "
                         f"got {prefix!r}")
    digest = hashlib.sha256(_canonical({"format": CELL_FORMAT, **params}).encode()).hexdigest()
    return f"{prefix}-{digest[:16]}"


def sanitize(obj):
    """Replace non-finite floats by None (JSON has no NaN/inf) recursively.

    Parameters
    ----------
    obj : JSON-like object

    Returns
    -------
    The same structure with ``nan``/``inf`` replaced by None.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    try:
        import numpy as np  # noqa: PLC0415
        if isinstance(obj, np.generic):
            return sanitize(obj.item())
    except ImportError:  # pragma: no cover
        pass
    return obj


def write_json_atomic(path, obj, *, indent: int | None = 1) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (temporary file + :func:`os.replace`).

    Parameters
    ----------
    path : str or os.PathLike
        Destination; its directory must exist.
    obj : JSON-serialisable object
        Non-finite floats are written as null.
    indent : int or None, default=1
    """
    write_text_atomic(path, json.dumps(sanitize(obj), indent=indent, allow_nan=False,
                                       default=_json_default) + "\n")


def _file_mode() -> int:
    """Permissions of a new file under the current umask (mkstemp alone gives 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + fsync + :func:`os.replace`).

    Parameters
    ----------
    path : str or os.PathLike
    text : str
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_bytes_atomic(path, data: bytes) -> None:
    """Binary variant of :func:`write_text_atomic` (used for the PNG plots).

    Parameters
    ----------
    path : str or os.PathLike
    data : bytes
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class CellStore:
    """The ``cells/`` directory of a study.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Study output directory; ``out_dir/cells`` is created when missing.

    Notes
    -----
    Creating the store deletes leftover ``*.tmp`` files of an interrupted run.
    A cell file that cannot be parsed (which atomic writes rule out, short of
    outside tampering) is treated as missing and recomputed.
    """

    def __init__(self, out_dir) -> None:
        self.dir = Path(out_dir) / "cells"
        self.dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.dir.glob(".*.tmp"):
            try:
                leftover.unlink()
            except OSError:
                pass

    def path(self, key: str) -> Path:
        """File of the cell ``key``."""
        return self.dir / f"{key}.json"

    def load(self, key: str) -> dict | None:
        """The stored cell, or None when it is not finished (or unreadable)."""
        p = self.path(key)
        try:
            with open(p, encoding="utf-8") as f:
                cell = json.load(f)
        except (OSError, ValueError):
            return None
        return cell if isinstance(cell, dict) and cell.get("key") == key else None

    def save(self, cell: dict) -> Path:
        """Write a finished cell (it must hold its ``key``) atomically; return its path."""
        p = self.path(cell["key"])
        write_json_atomic(p, cell)
        return p
