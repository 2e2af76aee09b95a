"""The ``host_memory`` engine setting: freed host memory stays in the process for the next call.

A CPU evaluation allocates and frees tensors of tens to hundreds of MB per call (the per-edge
activations, E × rows × C × 4 B). glibc's malloc serves every block above its mmap threshold
(32 MB at most) with a fresh ``mmap`` and gives it back on free, so each call faults its whole
working set in again and the kernel zeroes every page.

``keep`` tells glibc (``mallopt``) to serve large blocks from its heap (``M_MMAP_MAX = 0``) and
never to trim the heap (``M_TRIM_THRESHOLD = −1``): the next call reuses the blocks the last one
freed. Measured on a 2-core x86-64 VM, DPA4-Mini on rattled diamond, one thread, ``system``
against ``keep``: 216 atoms 1.60 → 1.07 s per call (145,000 → 0 minor page faults per call),
512 atoms 4.65 → 2.48 s (1.03 M → 2,500 faults). The process then keeps its peak memory until
it exits, and fragmentation adds to it (2,995 → 3,580 MB at 512 atoms; BENCHMARKS.md).
It is process-wide and one-way: the first model that applies it sets it for every later one.
Blocks larger than 64 MB that a non-main thread allocates still come from ``mmap`` (glibc's
fallback); torch allocates from the calling thread. Other C libraries (musl, macOS) are left as
they are.

=========  ===========================================================================
value      effect
=========  ===========================================================================
auto       (default) ``keep`` when a model is loaded for the CPU, nothing for CUDA models
keep       ``keep`` whatever the device
system     the C library's own behaviour
=========  ===========================================================================
"""

from __future__ import annotations

import ctypes
import platform
import threading

CHOICES = ("auto", "keep", "system")
#: glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4

_lock = threading.Lock()
_kept = False  # applied in this process


def _glibc_mallopt():
    """Return glibc's ``mallopt``, or None where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        fn = libc.mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def keep_freed_memory() -> bool:
    """Apply ``keep`` to this process (idempotent); whether it is in effect."""
    global _kept
    with _lock:
        if not _kept:
            mallopt = _glibc_mallopt()
            if mallopt is None:
                return False
            # both or neither: no mmap without the no-trim half would still fault pages in
            _kept = bool(mallopt(M_MMAP_MAX, 0))
            if _kept and not mallopt(M_TRIM_THRESHOLD, -1):
                mallopt(M_MMAP_MAX, 65536)  # glibc's default back
                _kept = False
        return _kept


def is_kept() -> bool:
    """Whether ``keep`` is in effect in this process."""
    return _kept


def apply(setting: str, device) -> str:
    """Apply ``setting`` for a model on ``device`` (a ``torch.device`` or its name).

    Returns one line saying what holds for this process now.
    """
    if setting not in CHOICES:
        raise ValueError(f"host_memory={setting!r} is not one of {', '.join(CHOICES)}")
    on_cpu = str(getattr(device, "type", device)).split(":")[0] == "cpu"
    wanted = setting == "keep" or (setting == "auto" and on_cpu)
    if wanted and not keep_freed_memory():
        return f"{setting}: the C library's own (not glibc: nothing to set)"
    if is_kept():
        how = "kept in the process for the next call (glibc: no mmap per block, no trim)"
        return f"{setting}: freed memory {how}" + ("" if wanted else ", set earlier")
    reason = "a CUDA model" if setting == "auto" else "as asked"
    return f"{setting}: the C library's own ({reason})"
