"""Checks of what callers hand to :meth:`mdband.Potential.evaluate` and ``device=``.

They raise one-line typed errors instead of silent reshapes (positions of shape (6, 2) read
as (4, 3)), surprises (``pbc="False"`` read as periodic) or torch tracebacks
(``device="tpu"``).
"""

from __future__ import annotations

import numpy as np
import torch

from mdband.errors import MdbandError, StructureError


def _shape(x) -> tuple:
    shape = getattr(x, "shape", None)  # numpy arrays and torch tensors alike
    return tuple(shape) if shape is not None else np.shape(x)


def _finite(x) -> bool:
    if isinstance(x, torch.Tensor):  # any device
        return bool(torch.isfinite(x.detach()).all())
    return bool(np.all(np.isfinite(np.asarray(x, dtype=np.float64))))


def check_frame_input(positions, cell, pbc) -> None:
    """Raise :class:`~mdband.errors.StructureError` unless the frame's input is well formed.

    That is: ``positions`` is (N, 3) and finite, ``cell`` is None or (3, 3) and finite, and
    ``pbc`` is one bool or three.

    ``pbc`` accepts Python and numpy bools and the integers 0 and 1 (as ASE does); strings and
    anything else are refused, since ``bool("False")`` is True.
    """
    try:
        shape = _shape(positions)
    except (TypeError, ValueError):
        shape = None
    if shape is None or len(shape) != 2 or shape[1] != 3:
        raise StructureError(f"positions must have shape (N, 3), got {shape}")
    try:
        finite = _finite(positions)
    except (TypeError, ValueError):
        raise StructureError("positions must be numbers") from None
    if not finite:
        raise StructureError("positions contain NaN or inf")
    if cell is not None:
        cshape = _shape(cell)
        if cshape != (3, 3):
            raise StructureError(f"cell must have shape (3, 3) (rows: cell vectors), got {cshape}")
        if not _finite(cell):
            raise StructureError("cell contains NaN or inf")
    _check_pbc(pbc)


def _check_pbc(pbc) -> None:
    if isinstance(pbc, (str, bytes)):
        raise StructureError(f"pbc must be True/False or three of them, got the string {pbc!r}")
    values = [pbc] if np.ndim(pbc) == 0 else list(np.asarray(pbc, dtype=object).reshape(-1))
    if len(values) not in (1, 3) or np.ndim(pbc) > 1:
        raise StructureError(f"pbc must be one bool or three, got {pbc!r}")
    for v in values:
        ok = isinstance(v, (bool, np.bool_)) or (
            isinstance(v, (int, np.integer)) and int(v) in (0, 1)
        )
        if not ok:
            raise StructureError(f"pbc must be True/False or three of them, got {pbc!r}")


def check_device(device) -> torch.device:
    """Return ``device`` as a :class:`torch.device`, or raise for a device mdband cannot use.

    The error is an :class:`~mdband.errors.MdbandError` in one line for a name torch does not
    know (``"tpu"``) or mdband does not run on (``"mps"``).
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        dev = None
    if dev is None:
        raise MdbandError(f"unknown device {device!r}; use auto, cpu, cuda or cuda:N")
    if dev.type not in ("cpu", "cuda"):
        raise MdbandError(f"device {device!r} is not supported; use auto, cpu, cuda or cuda:N")
    if dev.type == "cuda" and dev.index is not None and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if dev.index >= count:
            raise MdbandError(f"device {device!r} does not exist: {count} CUDA device(s)")
    return dev
