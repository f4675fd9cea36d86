"""Saving and loading fitted gpusvm estimators as a single ``.npz`` file.

A model file is a NumPy ``.npz`` archive read with ``allow_pickle=False`` (no code is ever
unpickled). It holds:

* one member per numeric fitted array, named without the trailing underscore (``coef``,
  ``intercept``, ``classes`` when the labels are numeric); sparse attributes as CSR, in
  ``<name>__data``, ``__indices``, ``__indptr``, ``__shape``;
* ``gpusvm_metadata``: UTF-8 JSON in a uint8 array: the format name ``"gpusvm-model"`` and
  version, the gpusvm version, the estimator class, its JSON-representable ``get_params()``,
  the scalar fitted attributes (``n_features_in_``, ``n_iter_``, ``history_``, ...),
  non-numeric labels as JSON, optional user metadata (``extra``) and, from version 2 on, a
  ``model`` summary (numbers of classes and outputs, ``loss``, ``multi_class``, ``C``, every
  output's ``lam``) that tells what the file holds without rebuilding the estimator.

Version history: 1, binary models only; 2, multiclass models (``coef`` of shape
``(n_outputs, n_features)``), the ``model`` summary, and the parameters ``C``, ``loss``,
``class_weight``, ``multi_class`` (and ``solver``, ``warm_start`` of SDCASVC).  Files of
version 1 load unchanged: the parameters they lack take their defaults, which give the same
predictions.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import zipfile
import zlib
from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._arrays import check_sparse_structure
from ._output import write_output
from ._version import __version__

__all__ = ["save_model", "load_model", "read_model_metadata", "skops_trusted_types",
           "check_restored", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "gpusvm-model"
#: version of the file layout; readers accept files up to their own version
FORMAT_VERSION = 2
METADATA_MEMBER = "gpusvm_metadata"

#: where each estimator class lives (imported lazily when a file needs it)
ESTIMATOR_MODULES = {"PegasosSVC": "gpusvm.estimators.pegasos", "SDCASVC": "gpusvm.estimators.sdca",
                     "KernelPegasosSVC": "gpusvm.estimators.kernel",
                     "LinearSVC": "gpusvm.estimators.linear_svc",
                     "LinearSVCCV": "gpusvm.estimators.linear_svc",
                     "SDCASVCCV": "gpusvm.estimators.cv", "PegasosSVCCV": "gpusvm.estimators.cv"}

#: the estimators with one linear model per output (several classes allowed)
_LINEAR = tuple(name for name in ESTIMATOR_MODULES if name != "KernelPegasosSVC")

#: parameters that do not change a fitted model's predictions and may be left out of the file
#: when they have no JSON form (the loaded estimator then has their default value)
DROPPABLE_PARAMS = ("callback", "random_state", "verbose")

_SPARSE_PARTS = ("data", "indices", "indptr", "shape")
_AGAIN = "save the model again with gpusvm.model_io.save_model (or `gpusvm fit`)"
_WRITTEN_BY = "load files written by gpusvm.model_io.save_model or `gpusvm fit`"


class _Unsupported(Exception):
    """A value with no JSON representation."""


# --------------------------------------------------------------------- JSON codec
def _to_json(value):
    """JSON-ready form of ``value``; tuples and dtypes are tagged so they round-trip."""
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, dict):      # e.g. class_weight={1: 5.0, -1: 1.0}: labels as keys
        return {"__items__": [[_to_json(k), _to_json(v)] for k, v in value.items()]}
    if isinstance(value, type) and issubclass(value, np.generic) or isinstance(value, np.dtype):
        return {"__dtype__": np.dtype(value).name}
    raise _Unsupported(type(value).__name__)


def _from_json(value):
    """Inverse of :func:`_to_json`."""
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_from_json(v) for v in value["__tuple__"])
        if set(value) == {"__dtype__"}:
            return np.dtype(value["__dtype__"]).type
        if set(value) == {"__items__"}:
            return {_hashable(_from_json(k)): _from_json(v) for k, v in value["__items__"]}
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _hashable(key):
    """A dictionary key read back from JSON (a list, e.g. from a tuple, is not hashable)."""
    if isinstance(key, list):
        raise TypeError(f"a dictionary key of the metadata is a list: {key!r}")
    return key


# --------------------------------------------------------------------- saving
def save_model(estimator, path, *, extra=None):
    """Write a fitted gpusvm estimator to one ``.npz`` file.

    Parameters
    ----------
    estimator : PegasosSVC, SDCASVC or another gpusvm estimator
        Must be fitted.
    path : str or os.PathLike
        Destination, written exactly as given (``.npz`` is the convention, not added). A
        regular file is replaced atomically (a failed write leaves the old file intact) with
        the permissions ``0666`` minus the umask, a symbolic link is followed, a character
        device or FIFO is written through; a directory, block device or socket is refused.
    extra : dict or None, default=None
        JSON-representable metadata kept with the model (the command line stores its
        preprocessing here); read back with :func:`read_model_metadata`.

    Returns
    -------
    path : str
        The path written.

    Raises
    ------
    TypeError
        When ``estimator`` is not a gpusvm estimator (save a Pipeline with skops, see
        :func:`skops_trusted_types`).
    sklearn.exceptions.NotFittedError
        When it is not fitted.
    ValueError
        When a fitted attribute or ``extra`` has no file representation.

    Notes
    -----
    Parameters that do not affect predictions and have no JSON form (a ``callback`` function,
    a ``RandomState`` ``random_state``) are not stored: the loaded estimator has their default
    value, and the metadata lists them under ``dropped_params``. Any other parameter without a
    JSON form (e.g. a callable kernel) makes saving fail rather than write a model that would
    predict differently.
    """
    cls = type(estimator)
    if not (isinstance(estimator, BaseEstimator) and cls.__module__.split(".")[0] == "gpusvm"):
        raise TypeError(
            f"save_model saves gpusvm estimators; got {cls.__module__}.{cls.__name__}: save a "
            "Pipeline or any other scikit-learn object holding gpusvm estimators without pickle "
            "with skops: skops.io.dump(obj, path), then skops.io.load(path, "
            "trusted=gpusvm.model_io.skops_trusted_types()) (pip install \"gpusvm[skops]\")")
    check_is_fitted(estimator)
    params, dropped = {}, []
    for name, value in estimator.get_params(deep=False).items():
        try:
            params[name] = _to_json(value)
        except _Unsupported as exc:
            if name not in DROPPABLE_PARAMS:
                raise ValueError(
                    f"cannot save {cls.__name__}: its parameter {name}={value!r} (a {exc}) has no "
                    "file representation; use a built-in option for it") from None
            dropped.append(name)
    arrays, array_names, sparse_names, json_arrays, attributes = {}, {}, {}, {}, {}
    for attr, value in vars(estimator).items():
        if not attr.endswith("_") or attr.startswith("_"):
            continue
        member = attr[:-1]
        try:
            if sp.issparse(value):
                kind = "csr_array" if isinstance(value, sp.sparray) else "csr_matrix"
                csr = sp.csr_matrix(value)
                for part in _SPARSE_PARTS:
                    arrays[f"{member}__{part}"] = np.asarray(getattr(csr, part))
                sparse_names[attr] = {"member": member, "type": kind}
            elif isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
                arrays[member] = value
                array_names[attr] = member
            elif isinstance(value, np.ndarray):
                json_arrays[attr] = {"values": _to_json(value.tolist()), "dtype": value.dtype.str,
                                     "shape": list(value.shape)}
            else:
                attributes[attr] = _to_json(value)
        except _Unsupported as exc:
            its = "its " if isinstance(value, np.ndarray) else ""
            raise ValueError(f"cannot save {cls.__name__}.{attr}: {its}values of type {exc} have no "
                             "file representation") from None
    try:
        extra_json = _to_json(extra) if extra is not None else None
    except _Unsupported as exc:
        raise ValueError(f"extra metadata must be JSON-representable; it holds a {exc}") from None
    metadata = {"model": _summary(estimator), "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
                "gpusvm_version": __version__, "estimator": cls.__name__, "module": cls.__module__,
                "params": params, "dropped_params": dropped, "arrays": array_names,
                "sparse": sparse_names, "json_arrays": json_arrays, "attributes": attributes,
                "extra": extra_json}
    blob = json.dumps(metadata, sort_keys=True).encode("utf-8")
    arrays[METADATA_MEMBER] = np.frombuffer(blob, dtype=np.uint8)
    return write_output(path, lambda f: np.savez_compressed(f, **arrays), what="model")


def _summary(estimator):
    """The ``model`` field: classes, outputs, loss, multi-class mode and regularisation."""
    params = estimator.get_params(deep=False)
    coef = getattr(estimator, "coef_", None)
    lam = getattr(estimator, "lam_", params.get("lam"))
    return {"n_classes": int(len(estimator.classes_)),
            "n_outputs": int(coef.shape[0]) if (isinstance(coef, np.ndarray) or sp.issparse(coef))
            and coef.ndim == 2 else 1,
            "loss": params.get("loss", "hinge"), "C": params.get("C"),
            "multi_class": params.get("multi_class", "ovr") if len(estimator.classes_) > 2 else None,
            "lam": np.asarray(lam, dtype=np.float64).tolist() if lam is not None else None}


def n_outputs_of(n_classes: int, multi_class: str) -> int:
    """Rows of ``coef_`` of a linear model of ``n_classes`` classes: 1 for two classes; ``K``,
    ``K (K - 1) / 2`` or ``K - 1`` for ``multi_class`` "ovr", "ovo" or "ordinal"."""
    if n_classes == 2:
        return 1
    if multi_class == "ovo":
        return n_classes * (n_classes - 1) // 2
    if multi_class == "ordinal":
        return n_classes - 1
    return n_classes


# --------------------------------------------------------------------- loading
#: the first bytes of a zip archive (every .npz file; an empty archive starts with PK\x05\x06)
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def _open_archive(path):
    """Open ``path`` as an npz archive, or raise a ValueError that says what is wrong."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory; pass the path of a model file (.npz)")
    with open(path, "rb") as f:
        head = f.read(16)
    if not head.startswith((*_ZIP_MAGIC, np.lib.format.MAGIC_PREFIX)):
        # np.load would try the file as a pickle and advise unpickling it: never here
        what = f"it starts with {head!r}" if head else "it is empty"
        raise ValueError(f"cannot read model file {path}: it is not a .npz archive ({what}); {_WRITTEN_BY}")
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(
            f"cannot read model file {path}: it is not a valid .npz archive ({exc}); the file is "
            f"truncated, corrupted or not a gpusvm model: {_AGAIN}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(f"{path} holds a single NumPy array, not a gpusvm model; {_WRITTEN_BY}")
    return archive


#: largest expansion of a deflate stream (1032:1), plus room for the zip and npy headers
_MAX_RATIO = 1100
_HEADER_SLACK = 4096


#: in place of a path: the checks of :func:`check_restored` (an estimator's state)
_Restored = namedtuple("_Restored", "name")


def _corrupted(path, detail):
    if isinstance(path, _Restored):
        return ValueError(f"the restored {path.name} is inconsistent ({detail}); it was altered "
                          "or not written by gpusvm: fit the estimator again")
    return ValueError(f"model file {path} is corrupted ({detail}); {_AGAIN}")


def _missing(path, name):
    return ValueError(f"model file {path} is incomplete: member {name!r} is missing; {_AGAIN}")


def _member(archive, path, name):
    """Read one member, turning a damaged archive into a clear ValueError.

    Before anything is allocated, the array shape declared in the member's npy header is
    checked against the bytes the member holds, and the member's uncompressed size against
    its compressed size: a small file cannot make the reader allocate more than about 1100
    times its own size.
    """
    filename = name + ".npy"
    try:
        info = archive.zip.getinfo(filename)
    except KeyError:
        raise _missing(path, name) from None
    if info.file_size > _MAX_RATIO * info.compress_size + _HEADER_SLACK:
        raise _corrupted(path, f"member {name!r} claims {info.file_size} bytes from "
                               f"{info.compress_size} compressed bytes")
    try:
        with archive.zip.open(filename) as f:
            version = np.lib.format.read_magic(f)
            header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                      else np.lib.format.read_array_header_2_0)
            shape, _, dtype = header(f)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, SyntaxError,
            TypeError) as exc:
        raise _corrupted(path, f"member {name!r}: {exc}") from None
    if dtype.hasobject or dtype.kind not in "biuf":
        raise _corrupted(path, f"member {name!r} has dtype {dtype}, not a number type")
    size = dtype.itemsize * math.prod(shape)
    if size > info.file_size:
        raise _corrupted(path, f"member {name!r} declares shape {shape} ({size} bytes) but "
                               f"holds {info.file_size} bytes")
    try:
        return archive[name]
    except KeyError:
        raise _missing(path, name) from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise _corrupted(path, f"member {name!r}: {exc}") from None


def _read_metadata(archive, path):
    if METADATA_MEMBER not in archive.files:
        raise ValueError(f"{path} is a .npz archive but not a gpusvm model (it has no gpusvm "
                         f"metadata); {_WRITTEN_BY}")
    raw = _member(archive, path, METADATA_MEMBER)
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"metadata is a {raw.dtype} array of shape {raw.shape}")
        metadata = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(metadata, dict):
            raise ValueError("metadata is not a JSON object")
    except RecursionError:
        raise _corrupted(path, "unreadable metadata: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _corrupted(path, f"unreadable metadata: {exc}") from None
    if metadata.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is a .npz archive but not a gpusvm model (format "
                         f"{metadata.get('format')!r}, expected {FORMAT_NAME!r}); {_WRITTEN_BY}")
    version = metadata.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _corrupted(path, f"format version {version!r}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written by gpusvm {metadata.get('gpusvm_version', '?')} in model format "
            f"version {version}, but this gpusvm {__version__} reads format versions up to "
            f"{FORMAT_VERSION}; upgrade gpusvm (pip install -U gpusvm) to load it")
    missing = [k for k in ("estimator", "params", "arrays", "attributes") if k not in metadata]
    if missing:
        raise _corrupted(path, f"metadata lacks {', '.join(missing)}")
    return metadata


def _estimator_class(name, module_name, path):
    """The estimator class ``name``, imported lazily from the gpusvm package only."""
    if not isinstance(name, str):
        raise _corrupted(path, f"the estimator name is {name!r}, not a string")
    candidates = [ESTIMATOR_MODULES[name]] if name in ESTIMATOR_MODULES else []
    if isinstance(module_name, str) and module_name.split(".")[0] == "gpusvm":
        candidates.append(module_name)
    for mod in (*candidates, "gpusvm"):
        try:
            module = importlib.import_module(mod)
        except ImportError:
            continue
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseEstimator):
            return cls
    raise ValueError(
        f"{path} holds a {name!r} estimator, which this gpusvm {__version__} does not provide "
        f"(known: {', '.join(sorted(ESTIMATOR_MODULES))}); upgrade gpusvm to load it")


def read_model_metadata(path):
    """Read the metadata of a model file without rebuilding the estimator.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :func:`save_model`.

    Returns
    -------
    dict
        The metadata described in the module docstring (``format``, ``format_version``,
        ``gpusvm_version``, ``estimator``, ``params``, ``attributes``, ``extra``, ...).

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When the file is not a readable gpusvm model (see :func:`load_model`).
    """
    path = os.fspath(path)
    with _open_archive(path) as archive:
        return _read_metadata(archive, path)


def load_model(path):
    """Rebuild a fitted estimator from a file written by :func:`save_model`.

    The file is read with ``allow_pickle=False``: loading never runs code from the file.

    Parameters
    ----------
    path : str or os.PathLike
        A model file.

    Returns
    -------
    estimator : PegasosSVC, SDCASVC or another gpusvm estimator
        Fitted, with the saved parameters and attributes.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When the file is truncated or corrupted, is not a gpusvm model (a foreign ``.npz``),
        was written in a newer format version, or holds an estimator class this version does
        not provide. The message says which.
    """
    path = os.fspath(path)
    with _open_archive(path) as archive:
        metadata = _read_metadata(archive, path)
        limit = archive[METADATA_MEMBER].size if METADATA_MEMBER in archive.files else 0
        try:
            cls = _estimator_class(metadata["estimator"], metadata.get("module"), path)
            estimator = _rebuild(archive, path, cls, metadata, limit)
        except RecursionError:
            raise _corrupted(path, "metadata nested too deeply") from None
        except (AttributeError, KeyError, TypeError, IndexError) as exc:
            raise _corrupted(path, f"inconsistent metadata: {exc}") from None
    _check_fitted(estimator, cls, path)
    return estimator


#: the name of a fitted attribute, as :func:`save_model` writes them
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*_")


def _attribute_name(cls, attr, path):
    """``attr`` if it may be set on a ``cls`` instance (a fitted-attribute name, no method)."""
    if not (isinstance(attr, str) and _ATTRIBUTE_NAME.fullmatch(attr)) or hasattr(cls, attr):
        raise _corrupted(path, f"{attr!r} is not a fitted attribute of {cls.__name__}")
    return attr


def _dict(value, what, path):
    if not isinstance(value, dict):
        raise _corrupted(path, f"metadata field {what} is not a JSON object")
    return value


def _rebuild(archive, path, cls, metadata, limit):
    """The estimator described by ``metadata``, its arrays read from ``archive``."""
    params = {k: _from_json(v) for k, v in _dict(metadata["params"], "params", path).items()}
    known = cls().get_params(deep=False)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(
            f"{path} sets parameters {', '.join(unknown)} that {cls.__name__} of gpusvm "
            f"{__version__} does not have; upgrade gpusvm to load it")
    estimator = cls(**params)
    if hasattr(estimator, "_validate_params"):
        try:
            estimator._validate_params()
        except ValueError as exc:
            raise _corrupted(path, _first_line(exc)) from None
    for attr, member in _dict(metadata["arrays"], "arrays", path).items():
        setattr(estimator, _attribute_name(cls, attr, path), _member(archive, path, member))
    for attr, spec in _dict(metadata.get("sparse", {}), "sparse", path).items():
        data, indices, indptr, shape = (_member(archive, path, f"{spec['member']}__{p}")
                                        for p in _SPARSE_PARTS)
        make = sp.csr_array if spec.get("type") == "csr_array" else sp.csr_matrix
        setattr(estimator, _attribute_name(cls, attr, path),
                make(_checked_csr(path, attr, data, indices, indptr, shape)[:3],
                     shape=tuple(int(v) for v in shape)))
    for attr, spec in _dict(metadata.get("json_arrays", {}), "json_arrays", path).items():
        setattr(estimator, _attribute_name(cls, attr, path), _json_array(path, attr, spec, limit))
    for attr, value in _dict(metadata["attributes"], "attributes", path).items():
        setattr(estimator, _attribute_name(cls, attr, path), _from_json(value))
    return estimator


def _first_line(exc) -> str:
    return " ".join(str(exc).split())


def _json_array(path, attr, spec, limit):
    """A non-numeric array stored as JSON, its shape and dtype checked before allocation."""
    shape = spec["shape"]
    attr = attr.rstrip("_")
    if not (isinstance(shape, list) and all(isinstance(v, int) and not isinstance(v, bool)
                                            and v >= 0 for v in shape)):
        raise _corrupted(path, f"{attr} has the shape {shape!r}")
    try:
        dtype = np.dtype(spec["dtype"])
    except (TypeError, ValueError):
        raise _corrupted(path, f"{attr} has the dtype {spec['dtype']!r}") from None
    if dtype.kind not in "biufUSO" or dtype.itemsize > 4 * limit + 16:
        raise _corrupted(path, f"{attr} has the dtype {spec['dtype']!r}")
    values = _from_json(spec["values"])
    try:
        found = np.array(values, dtype=object)
    except ValueError:
        found = None
    if found is None or found.shape != tuple(shape):
        raise _corrupted(path, f"{attr} declares shape {tuple(shape)} but holds values of another shape")
    arr = np.empty(found.shape, dtype=dtype)
    try:
        arr[...] = found
    except (ValueError, TypeError) as exc:
        raise _corrupted(path, f"{attr}: {_first_line(exc)}") from None
    return arr


def _checked_csr(path, attr, data, indices, indptr, shape):
    """The parts of a CSR matrix, after a full check of its structure (scipy checks only the
    lengths; a bad index or ``indptr`` would make every later product read and write out of
    bounds)."""
    name = attr.rstrip("_")
    if shape.ndim != 1 or shape.size != 2 or shape.dtype.kind not in "iu" or np.any(shape < 0):
        raise _corrupted(path, f"{name} has the shape {shape.tolist()}")
    n_rows, n_cols = (int(v) for v in shape)
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or indptr.size != n_rows + 1:
        raise _corrupted(path, f"{name} has an indptr of shape {indptr.shape} for {n_rows} rows")
    if indices.ndim != 1 or indices.dtype.kind not in "iu" or data.ndim != 1 \
            or data.shape != indices.shape or data.dtype.kind != "f":
        raise _corrupted(path, f"{name} has indices of shape {indices.shape} and data of shape "
                               f"{data.shape} ({data.dtype})")
    if indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
        raise _corrupted(path, f"the indptr of {name} is not a non-decreasing sequence from 0 "
                               f"to {indices.size}")
    if indices.size and (indices.min() < 0 or indices.max() >= n_cols):
        raise _corrupted(path, f"{name} has column indices outside [0, {n_cols})")
    return data, indices, indptr, shape


def _float_array(estimator, attr, shape, path):
    value = getattr(estimator, attr, None)
    name = attr.rstrip("_")
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise _corrupted(path, f"{name} is missing or not a float array")
    if value.shape != shape:
        raise _corrupted(path, f"{name} has shape {value.shape}, expected {shape}")
    if not np.all(np.isfinite(value)):
        raise _corrupted(path, f"{name} holds NaN or infinity")
    return value


def _sparse_float_array(value, name, shape, path):
    """Check a sparse fitted array (``coef_`` after ``sparsify()``) as :func:`_float_array`."""
    if value.shape != shape:
        raise _corrupted(path, f"{name} has shape {value.shape}, expected {shape}")
    if value.format != "csr" or value.dtype.kind != "f" or not np.all(np.isfinite(value.data)):
        raise _corrupted(path, f"{name} is not a finite float CSR matrix")
    try:
        check_sparse_structure(value)
    except ValueError as exc:
        raise _corrupted(path, f"{name}: " + _first_line(exc)) from None


def _check_fitted(estimator, cls, path):
    """Check every fitted array a prediction uses, so that no later step can misbehave."""
    n_features = getattr(estimator, "n_features_in_", None)
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise _corrupted(path, f"n_features_in_ = {n_features!r}")
    classes = getattr(estimator, "classes_", None)
    if not isinstance(classes, np.ndarray) or classes.ndim != 1:
        raise _corrupted(path, "classes is missing or not a 1-D array")
    try:
        distinct = np.unique(classes).size
    except TypeError:
        distinct = -1
    multiclass = cls.__name__ in _LINEAR
    if classes.size < 2 or distinct != classes.size or (classes.size > 2 and not multiclass):
        expected = "2 or more" if multiclass else "2"
        raise _corrupted(path, f"classes holds {classes.size} values; a model separates "
                               f"{expected} distinct classes")
    if cls.__name__ == "KernelPegasosSVC":
        sv = getattr(estimator, "support_vectors_", None)
        if sp.issparse(sv):
            if sv.dtype.kind != "f" or not np.all(np.isfinite(sv.data)):
                raise _corrupted(path, "support_vectors holds NaN, infinity or non-floats")
            try:
                check_sparse_structure(sv)
            except ValueError as exc:
                raise _corrupted(path, "support_vectors: " + _first_line(exc)) from None
        elif not isinstance(sv, np.ndarray) or sv.ndim != 2 or sv.dtype.kind != "f" \
                or not np.all(np.isfinite(sv)):
            raise _corrupted(path, "support_vectors is missing or not a finite 2-D float array")
        n_sv = sv.shape[0]
        if sv.shape[1] != n_features:
            raise _corrupted(path, f"support_vectors has {sv.shape[1]} features but "
                                   f"n_features_in_ = {n_features}")
        _float_array(estimator, "dual_coef_", (1, n_sv), path)
        _float_array(estimator, "intercept_", (1,), path)
        support = getattr(estimator, "support_", None)
        if not isinstance(support, np.ndarray) or support.dtype.kind not in "iu" or support.shape != (n_sv,):
            raise _corrupted(path, f"support is not an integer array of {n_sv} indices")
        gamma = getattr(estimator, "gamma_", None)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) \
                or not (math.isfinite(gamma) and gamma > 0):
            raise _corrupted(path, f"gamma_ = {gamma!r}")
        return
    coef = getattr(estimator, "coef_", None)
    if cls.__name__ in _LINEAR or coef is not None:
        mode = getattr(estimator, "multi_class", "ovr")
        if mode not in ("ovr", "ovo", "ordinal"):
            raise _corrupted(path, f"multi_class = {mode!r}")
        m = n_outputs_of(classes.size, mode)
        if (isinstance(coef, np.ndarray) or sp.issparse(coef)) and coef.ndim == 2 \
                and coef.shape[0] == m and coef.shape[1] != n_features:
            raise _corrupted(path, f"coef has {coef.shape[-1]} features but n_features_in_ = {n_features}")
        if sp.issparse(coef):                   # sparsify(): a CSR coef_ (structure checked)
            _sparse_float_array(coef, "coef", (m, n_features), path)
        else:
            _float_array(estimator, "coef_", (m, n_features), path)
        _float_array(estimator, "intercept_", (m,), path)


# --------------------------------------------------------------------- skops
def skops_trusted_types():
    """The gpusvm types to trust when loading a skops file: whole pipelines without pickle.

    :func:`save_model` writes one gpusvm estimator. A Pipeline (a TF-IDF vectoriser before a
    gpusvm estimator, say) is saved without pickle by skops (``pip install "gpusvm[skops]"``),
    whose loader refuses every type it does not trust: list gpusvm's with this function
    (``skops.io.load(path, trusted=skops_trusted_types())``; see docs/estimators.md).  A gpusvm
    estimator restored by skops (or by pickle) has its fitted arrays checked as
    :func:`load_model` checks a model file's (:func:`check_restored`).

    Returns
    -------
    list of str
        Fully qualified names of gpusvm's estimator classes, as
        ``skops.io.get_untrusted_types`` reports them.
    """
    return [f"{module}.{name}" for name, module in sorted(ESTIMATOR_MODULES.items())]


def check_restored(estimator) -> None:
    """Check a fitted estimator's state as :func:`load_model` checks a model file's.

    Called by the estimators' ``__setstate__`` (skops and pickle restore through it), so that
    a state altered in the file cannot reach compiled code.

    Parameters
    ----------
    estimator : gpusvm estimator

    Raises
    ------
    ValueError
        When a fitted array a prediction uses has the wrong shape, type or values (the
        message names it).
    """
    cls = type(estimator)
    _check_fitted(estimator, cls, _Restored(cls.__name__))
