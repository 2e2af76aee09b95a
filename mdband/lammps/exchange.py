"""Per-layer ghost exchange for message-passing models on a spatial decomposition.

A model receives ``exchange`` and calls ``x = exchange(x)`` on its node features (rows = local
atoms first, then ghost atoms) before every interaction block. :class:`GhostExchange` makes
that a differentiable, collective operation:

* forward: every ghost row is replaced by its owner's row (LAMMPS forward communication; the
  owner may live on another rank, or be a local atom when the ghost is a periodic image);
* backward: the cotangents of ghost rows are added into their owners' rows (LAMMPS reverse
  communication) and the ghost rows of the result are zero, since the output does not depend
  on the input's ghost rows.

``exchange.complete(p)`` serves per-atom partial sums (a zone-bridged model's source gate:
each edge lives on the rank of its centre atom, so the sum over an atom's edges is spread over
the ranks holding a copy of it): every row becomes the total over all copies of its atom,
owner and ghosts alike (reverse, then forward communication). That map is its own adjoint, so
its backward is the same operation on the cotangents.

Every rank must call these the same number of times in the same order (also a rank with no
atoms), which holds because each rank runs the same model. The rows travel as float64 through host
memory; the result has the input's dtype and device.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

# backend(rows, reverse): rows is a C-contiguous float64 (n_all, width) numpy array, changed in
# place: forward copies owner rows into ghost rows, reverse adds ghost rows into owner rows.
Backend = Callable[[np.ndarray, bool], None]


class GhostExchange:
    """The ``exchange`` callable handed to a model for one evaluation."""

    def __init__(self, backend: Backend, n_all: int, n_local: int) -> None:
        self.backend = backend
        self.n_all = int(n_all)
        self.n_local = int(n_local)
        self.calls = 0  # forward and backward exchanges done

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Replace every ghost row of ``x`` by its owner's row (differentiable, collective)."""
        if x.shape[0] != self.n_all:
            raise ValueError(
                f"exchange expects {self.n_all} rows (local + ghost atoms), got {x.shape[0]}"
            )
        return _ExchangeFunction.apply(x, self)

    def complete(self, x: torch.Tensor) -> torch.Tensor:
        """Sum each row over every copy of its atom on every rank (differentiable)."""
        if x.shape[0] != self.n_all:
            raise ValueError(
                f"exchange expects {self.n_all} rows (local + ghost atoms), got {x.shape[0]}"
            )
        return _CompleteFunction.apply(x, self)

    def complete_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Give every row the total over all copies of its atom: reverse, then forward comm."""
        rows = self._rows(x)
        if rows.shape[1] > 0:
            self.backend(rows.numpy(), True)  # ghosts' partials into their owners
            self.backend(rows.numpy(), False)  # the owners' totals back onto the ghosts
        self.calls += 2
        return rows.to(device=x.device, dtype=x.dtype).reshape(x.shape)

    def _rows(self, t: torch.Tensor) -> torch.Tensor:
        width = int(np.prod(t.shape[1:], dtype=np.int64)) if t.dim() > 1 else 1
        rows = torch.empty((self.n_all, width), dtype=torch.float64)
        rows.copy_(t.detach().reshape(self.n_all, width))
        return rows

    def forward_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Copy every owner's row into its ghost rows (one forward communication)."""
        rows = self._rows(x)
        if rows.shape[1] > 0:
            self.backend(rows.numpy(), False)
        self.calls += 1
        return rows.to(device=x.device, dtype=x.dtype).reshape(x.shape)

    def reverse_rows(self, g: torch.Tensor) -> torch.Tensor:
        """Add the ghost rows of ``g`` into their owners' rows, then zero the ghost rows."""
        rows = self._rows(g)
        if rows.shape[1] > 0:
            self.backend(rows.numpy(), True)
        rows[self.n_local :] = 0.0
        self.calls += 1
        return rows.to(device=g.device, dtype=g.dtype).reshape(g.shape)


class _ExchangeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, exchange):
        ctx.exchange = exchange
        return exchange.forward_rows(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.exchange.reverse_rows(grad), None


class _CompleteFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, exchange):
        ctx.exchange = exchange
        return exchange.complete_rows(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.exchange.complete_rows(grad), None


def lammps_backend(handle) -> Backend:
    """Return the backend of a running ``pair_style mdband``: LAMMPS' own forward/reverse comm."""
    import _mdband_lammps  # created by the plugin inside the interpreter that runs it

    def backend(rows: np.ndarray, reverse: bool) -> None:
        _mdband_lammps.exchange(handle, rows, reverse)

    return backend


def owner_backend(owner: np.ndarray) -> Backend:
    """Build a single-process backend from an owner index per row.

    ``owner[i] == i`` for local rows. The backend stands in for LAMMPS in tests: the model sees
    the same local + ghost layout and the same exchange calls as under a spatial decomposition.
    """
    owner = np.asarray(owner, dtype=np.int64)
    ghosts = np.nonzero(owner != np.arange(owner.shape[0]))[0]

    def backend(rows: np.ndarray, reverse: bool) -> None:
        if reverse:
            np.add.at(rows, owner[ghosts], rows[ghosts])
        else:
            rows[ghosts] = rows[owner[ghosts]]

    return backend
