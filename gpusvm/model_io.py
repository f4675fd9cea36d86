"""Saving and loading fitted gpusvm estimators as a single ``.npz`` file.

A model file is a NumPy ``.npz`` archive readable with ``allow_pickle=False``
(no code is ever unpickled). It holds:

* one array member per fitted array attribute, named without the trailing
  underscore (``coef``, ``intercept``, ``classes`` when the labels are numeric);
  sparse attributes (stored as CSR) as ``<name>__data``, ``__indices``,
  ``__indptr``, ``__shape``;
* the member ``gpusvm_metadata``: UTF-8 JSON in a uint8 array, with the format
  name ``"gpusvm-model"``, the format version, the gpusvm version, the
  estimator class, its JSON-representable ``get_params()``, the scalar fitted
  attributes (``n_features_in_``, ``n_iter_``, ``history_``, ...), non-numeric
  labels as JSON, and optional user metadata (``extra``).
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
import zipfile
import zlib

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from ._version import __version__

__all__ = ["save_model", "load_model", "read_model_metadata", "FORMAT_NAME", "FORMAT_VERSION"]

FORMAT_NAME = "gpusvm-model"
#: version of the file layout; readers accept files up to their own version
FORMAT_VERSION = 1
METADATA_MEMBER = "gpusvm_metadata"

#: where each estimator class lives (imported lazily when a file needs it)
ESTIMATOR_MODULES = {
    "PegasosSVC": "gpusvm.estimators",
    "SDCASVC": "gpusvm.estimators_sdca",
    "KernelPegasosSVC": "gpusvm.kernel_estimator",
}

#: parameters that do not change a fitted model's predictions and may be left out of the file
#: when they have no JSON form (the loaded estimator then has their default value)
DROPPABLE_PARAMS = ("callback", "random_state", "verbose")

_SPARSE_PARTS = ("data", "indices", "indptr", "shape")
_AGAIN = "save the model again with gpusvm.model_io.save_model (or `gpusvm fit`)"


class _Unsupported(Exception):
    """A value with no JSON representation."""


# --------------------------------------------------------------------- JSON codec
def _to_json(value):
    """JSON-ready form of ``value``; tuples and dtypes are tagged so they round-trip."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return {"__tuple__": [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, type) and issubclass(value, np.generic):
        return {"__dtype__": np.dtype(value).name}
    if isinstance(value, np.dtype):
        return {"__dtype__": value.name}
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
        return {k: _from_json(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------- saving
def save_model(estimator, path, *, extra=None):
    """Write a fitted gpusvm estimator to one ``.npz`` file.

    Parameters
    ----------
    estimator : PegasosSVC, SDCASVC or another gpusvm estimator
        Must be fitted.
    path : str or os.PathLike
        Destination, written exactly as given (no suffix is added; ``.npz`` is
        the convention). The file is replaced atomically.
    extra : dict or None, default=None
        JSON-representable metadata kept with the model (the command line
        stores its preprocessing here); read back with
        :func:`read_model_metadata`.

    Returns
    -------
    path : str
        The path written.

    Raises
    ------
    TypeError
        When ``estimator`` is not a gpusvm estimator.
    sklearn.exceptions.NotFittedError
        When it is not fitted.
    ValueError
        When a fitted attribute or ``extra`` has no file representation.

    Notes
    -----
    Parameters that do not affect predictions and have no JSON form (a
    ``callback`` function, a ``RandomState`` ``random_state``) are not stored;
    the loaded estimator has their default value, and the metadata lists them
    under ``dropped_params``. Any other parameter without a JSON form (e.g. a
    callable kernel) makes saving fail rather than write a model that would
    predict differently.
    """
    cls = type(estimator)
    if not (isinstance(estimator, BaseEstimator) and cls.__module__.split(".")[0] == "gpusvm"):
        raise TypeError(f"save_model saves gpusvm estimators; got {cls.__module__}.{cls.__name__}")
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
        if sp.issparse(value):
            kind = "csr_array" if isinstance(value, sp.sparray) else "csr_matrix"
            value = sp.csr_matrix(value)
            for part in _SPARSE_PARTS:
                arrays[f"{member}__{part}"] = np.asarray(getattr(value, part))
            sparse_names[attr] = {"member": member, "type": kind}
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
            arrays[member] = value
            array_names[attr] = member
        elif isinstance(value, np.ndarray):
            try:
                json_arrays[attr] = {"values": _to_json(value.tolist()), "dtype": value.dtype.str,
                                     "shape": list(value.shape)}
            except _Unsupported as exc:
                raise ValueError(f"cannot save {cls.__name__}.{attr}: its values of type {exc} "
                                 "have no file representation") from None
        else:
            try:
                attributes[attr] = _to_json(value)
            except _Unsupported as exc:
                raise ValueError(f"cannot save {cls.__name__}.{attr}: values of type {exc} "
                                 "have no file representation") from None
    try:
        extra_json = _to_json(extra) if extra is not None else None
    except _Unsupported as exc:
        raise ValueError(f"extra metadata must be JSON-representable; it holds a {exc}") from None
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "gpusvm_version": __version__,
        "estimator": cls.__name__,
        "module": cls.__module__,
        "params": params,
        "dropped_params": dropped,
        "arrays": array_names,
        "sparse": sparse_names,
        "json_arrays": json_arrays,
        "attributes": attributes,
        "extra": extra_json,
    }
    blob = json.dumps(metadata, sort_keys=True).encode("utf-8")
    arrays[METADATA_MEMBER] = np.frombuffer(blob, dtype=np.uint8)
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".gpusvm-model-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# --------------------------------------------------------------------- loading
def _open_archive(path):
    """Open ``path`` as an npz archive, or raise a ValueError that says what is wrong."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ValueError(f"{path} is a directory; pass the path of a model file (.npz)")
    try:
        archive = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(
            f"cannot read model file {path}: it is not a valid .npz archive ({exc}); the file is "
            f"truncated, corrupted or not a gpusvm model: {_AGAIN}") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{path} holds a single NumPy array, not a gpusvm model; load files written by "
            "gpusvm.model_io.save_model or `gpusvm fit`")
    return archive


def _member(archive, path, name):
    """Read one member, turning a damaged archive into a clear ValueError."""
    try:
        return archive[name]
    except KeyError:
        raise ValueError(f"model file {path} is incomplete: member {name!r} is missing; "
                         f"{_AGAIN}") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise ValueError(f"model file {path} is corrupted (member {name!r}: {exc}); "
                         f"{_AGAIN}") from None


def _read_metadata(archive, path):
    if METADATA_MEMBER not in archive.files:
        raise ValueError(
            f"{path} is a .npz archive but not a gpusvm model (it has no gpusvm metadata); "
            "load files written by gpusvm.model_io.save_model or `gpusvm fit`")
    raw = _member(archive, path, METADATA_MEMBER)
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"metadata is a {raw.dtype} array of shape {raw.shape}")
        metadata = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(metadata, dict):
            raise ValueError("metadata is not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"model file {path} is corrupted (unreadable metadata: {exc}); "
                         f"{_AGAIN}") from None
    if metadata.get("format") != FORMAT_NAME:
        raise ValueError(
            f"{path} is a .npz archive but not a gpusvm model (format "
            f"{metadata.get('format')!r}, expected {FORMAT_NAME!r}); load files written by "
            "gpusvm.model_io.save_model or `gpusvm fit`")
    version = metadata.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"model file {path} is corrupted (format version {version!r}); {_AGAIN}")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"{path} was written by gpusvm {metadata.get('gpusvm_version', '?')} in model format "
            f"version {version}, but this gpusvm {__version__} reads format versions up to "
            f"{FORMAT_VERSION}; upgrade gpusvm (pip install -U gpusvm) to load it")
    required = ("estimator", "params", "arrays", "attributes")
    missing = [k for k in required if k not in metadata]
    if missing:
        raise ValueError(f"model file {path} is corrupted (metadata lacks {', '.join(missing)}); "
                         f"{_AGAIN}")
    return metadata


def _estimator_class(name, module_name, path):
    """The estimator class ``name``, imported lazily from the gpusvm package only."""
    candidates = []
    if name in ESTIMATOR_MODULES:
        candidates.append(ESTIMATOR_MODULES[name])
    if isinstance(module_name, str) and module_name.split(".")[0] == "gpusvm":
        candidates.append(module_name)
    candidates.append("gpusvm")
    for mod in candidates:
        try:
            module = importlib.import_module(mod)
        except ImportError:
            continue
        cls = getattr(module, name, None) if isinstance(name, str) else None
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
        The metadata described in the module docstring (``format``,
        ``format_version``, ``gpusvm_version``, ``estimator``, ``params``,
        ``attributes``, ``extra``, ...).

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

    The file is read with ``allow_pickle=False``: loading never runs code
    from the file.

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
        When the file is truncated or corrupted, is not a gpusvm model (a
        foreign ``.npz``), was written in a newer format version, or holds an
        estimator class this version does not provide. The message says which.
    """
    path = os.fspath(path)
    with _open_archive(path) as archive:
        metadata = _read_metadata(archive, path)
        cls = _estimator_class(metadata["estimator"], metadata.get("module"), path)
        try:
            params = {k: _from_json(v) for k, v in metadata["params"].items()}
            known = cls().get_params(deep=False)
            unknown = sorted(set(params) - set(known))
            if unknown:
                raise ValueError(
                    f"{path} sets parameters {', '.join(unknown)} that {cls.__name__} of gpusvm "
                    f"{__version__} does not have; upgrade gpusvm to load it")
            estimator = cls(**params)
            for attr, member in metadata["arrays"].items():
                setattr(estimator, attr, _member(archive, path, member))
            for attr, spec in metadata.get("sparse", {}).items():
                data, indices, indptr, shape = (_member(archive, path, f"{spec['member']}__{p}")
                                                for p in _SPARSE_PARTS)
                make = sp.csr_array if spec.get("type") == "csr_array" else sp.csr_matrix
                setattr(estimator, attr, make((data, indices, indptr), shape=tuple(shape.tolist())))
            for attr, spec in metadata.get("json_arrays", {}).items():
                values = _from_json(spec["values"])
                arr = np.empty(tuple(spec["shape"]), dtype=np.dtype(spec["dtype"]))
                arr[...] = values
                setattr(estimator, attr, arr)
            for attr, value in metadata["attributes"].items():
                setattr(estimator, attr, _from_json(value))
        except (AttributeError, KeyError, TypeError) as exc:
            raise ValueError(f"model file {path} is corrupted (inconsistent metadata: {exc}); "
                             f"{_AGAIN}") from None
    _check_shapes(estimator, path)
    return estimator


def _check_shapes(estimator, path):
    """Catch a file whose arrays do not fit together (e.g. edited by hand)."""
    n_features = getattr(estimator, "n_features_in_", None)
    coef = getattr(estimator, "coef_", None)
    if coef is not None and n_features is not None and coef.shape[-1] != n_features:
        raise ValueError(
            f"model file {path} is corrupted (coef has {coef.shape[-1]} features but "
            f"n_features_in_ = {n_features}); {_AGAIN}")
    intercept = getattr(estimator, "intercept_", None)
    if coef is not None and intercept is not None and intercept.shape[0] != coef.shape[0]:
        raise ValueError(
            f"model file {path} is corrupted (coef has {coef.shape[0]} rows but intercept "
            f"{intercept.shape[0]} values); {_AGAIN}")
