"""SentinelStorage: a RotationStorage stand-in that catches reads of the wrong layout (tests).

Its ``data`` can only be read through ``require(layout, consumer)`` with the storage's own
layout; a direct ``.data`` access or a request for the other layout raises
:class:`~mdband.errors.LayoutMismatchError`. Every successful read is logged in ``reads`` and
every refused one in ``violations``, so a test can run a whole forward/backward on a sentinel and
prove that no consumer touched the layout it did not declare.
"""

from __future__ import annotations

import torch

from mdband.errors import LayoutMismatchError
from mdband.so3.storage import RotationLayout, RotationStorage


class SentinelStorage:
    """Behaves like :class:`RotationStorage` for consumers that go through ``require``."""

    def __init__(self, layout: RotationLayout, lmax: int, data: torch.Tensor) -> None:
        # the real class validates the per-edge shape of the layout (mis-tags raise here)
        self._inner = RotationStorage(layout, lmax, data)
        self.reads: list[tuple[str, RotationLayout]] = []
        self.violations: list[str] = []

    @classmethod
    def wrap(cls, storage: RotationStorage) -> SentinelStorage:
        """Return a sentinel holding the data of ``storage`` in its layout."""
        return cls(storage.layout, storage.lmax, storage.require(storage.layout, "sentinel"))

    @property
    def layout(self) -> RotationLayout:
        """Return the layout of the stored rotations."""
        return self._inner.layout

    @property
    def lmax(self) -> int:
        """Return the largest degree of the stored rotations."""
        return self._inner.lmax

    @property
    def n_edges(self) -> int:
        """Return the number of edges."""
        return self._inner.n_edges

    @property
    def data(self) -> torch.Tensor:
        """Refuse a direct read: log a violation and raise LayoutMismatchError."""
        msg = (
            f"direct read of {self.layout.value} rotation data: consumers must call "
            "require(layout, consumer)"
        )
        self.violations.append(msg)
        raise LayoutMismatchError(msg)

    def require(self, layout: RotationLayout, consumer: str) -> torch.Tensor:
        """Return the data if ``layout`` is the storage's own (logged), else raise (logged)."""
        if layout is not self.layout:
            msg = f"{consumer} read {layout.value} rotations from a {self.layout.value} storage"
            self.violations.append(msg)
            raise LayoutMismatchError(msg)
        self.reads.append((consumer, layout))
        return self._inner.data
