"""Counting the atomics of emulated kernels (the work a GPU's memory system would see).

Inside ``with count_atomics() as records:`` every launch of an emulated kernel (direct, through a
graph, or through :mod:`gpusvm_emulator.streams`) appends one record (a dict) to ``records``:

``kernel``        the kernel's name (or name expression);
``grid``          its blocks;
``global``        atomics on the launch's argument arrays (global memory);
``returning``     of these, the value-returning ones (``atomicAdd``, ``atomicCAS``, ...: ATOM);
``red``           of these, the non-returning reductions (``gpusvm_emu_red_add``: RED);
``shared``        atomics on other addresses (shared memory);
``max_per_block`` the most global atomics one block made on one address;
``max_per_address`` the most global atomics one address received in the launch;
``by_array``      argument array's address -> (its atomics, the most one block made on one of
                  its addresses).

Counting records every atomic under a lock: it is for measuring, not for speed.
"""
import contextlib
import ctypes

import numpy as np

__all__ = ["count_atomics"]

_records = None          # the list being filled, or None
_enabled = set()         # the shared objects whose recording is on


@contextlib.contextmanager
def count_atomics():
    """Record every emulated launch's atomics while the block runs (see the module's docstring).

    Yields
    ------
    list of dict
        One record per launch, in launch order.
    """
    global _records
    if _records is not None:
        raise RuntimeError("count_atomics() is already active")
    _records = []
    try:
        yield _records
    finally:
        _records = None
        for lib in _enabled:
            lib.gpusvm_emu_count_atomics(0)
        _enabled.clear()


def active():
    """True inside :func:`count_atomics`."""
    return _records is not None


def before(lib):
    """Turn recording on in ``lib`` (a module's shared object) before a launch."""
    if lib not in _enabled:
        lib.gpusvm_emu_count_atomics.restype = None
        lib.gpusvm_emu_count_atomics.argtypes = [ctypes.c_int]
        lib.gpusvm_emu_take_atomics.restype = ctypes.c_longlong
        lib.gpusvm_emu_take_atomics.argtypes = [ctypes.c_void_p, ctypes.c_longlong]
        lib.gpusvm_emu_count_atomics(1)
        _enabled.add(lib)


def after(lib, name, grid, args):
    """Take ``lib``'s records of the launch just made and append its summary."""
    n = lib.gpusvm_emu_take_atomics(None, 0)
    ev = np.zeros((n, 2), dtype=np.uint64)
    if n:
        lib.gpusvm_emu_take_atomics(ev.ctypes.data, n)
    addr, block_kind = ev[:, 0], ev[:, 1]
    glob = np.zeros(n, dtype=bool)
    by_array = {}
    for a in args:
        if isinstance(a, np.ndarray) and a.nbytes:
            lo = a.ctypes.data
            on = (addr >= lo) & (addr < lo + a.nbytes)
            glob |= on
            if on.any() and lo not in by_array:
                pairs = np.stack([addr[on], block_kind[on] >> np.uint64(1)], axis=1)
                by_array[lo] = (int(on.sum()),
                                int(np.unique(pairs, axis=0, return_counts=True)[1].max()))
    kind = block_kind & np.uint64(1)
    rec = {"kernel": name, "grid": int(np.prod(grid)), "global": int(glob.sum()),
           "returning": int((glob & (kind == 0)).sum()), "red": int((glob & (kind == 1)).sum()),
           "shared": int((~glob).sum()), "max_per_block": 0, "max_per_address": 0,
           "by_array": by_array}
    if rec["global"]:
        ga = addr[glob]
        pairs = np.stack([ga, block_kind[glob] >> np.uint64(1)], axis=1)
        rec["max_per_block"] = int(np.unique(pairs, axis=0, return_counts=True)[1].max())
        rec["max_per_address"] = int(np.unique(ga, return_counts=True)[1].max())
    _records.append(rec)
