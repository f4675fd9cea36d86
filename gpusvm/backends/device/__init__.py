"""The device backend: CUDA kernels driven through CuPy on a GPU, or through the CPU emulator.

:mod:`.backend` holds :class:`DeviceBackend` (the ``*_m`` primitives, one kernel family
specialised per fit), :mod:`.runtime` the runtimes (CuPy or the emulator, a stream of the
backend's own, the segment graphs).
"""

from .backend import DeviceBackend, choose_lanes, estimate_device_bytes, make_device_backend

__all__ = ["DeviceBackend", "choose_lanes", "estimate_device_bytes", "make_device_backend"]
