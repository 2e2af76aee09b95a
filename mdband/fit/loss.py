"""The loss of ``mdband fit`` and the validation metrics.

Loss of a batch of ``B`` frames (eV, Å)::

    L = w_E · mean_b ((E_b − E_b^ref) / N_b)²
      + w_F · mean_{atoms, xyz} (F − F^ref)²
      + w_W · mean_{b with virial} mean_{ij} ((W_b − W_b^ref)_{ij} / N_b)²

Forces and virials come from ``g = ∂E/∂edge_vec`` exactly as in :class:`mdband.Potential`, with
``create_graph=True`` in training so the loss is differentiated through them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from mdband.fit.config import FitConfig
from mdband.fit.data import Batch, GraphFrame, collate


@dataclass
class Metrics:
    """Validation errors: energy per atom (meV/atom), force components (meV/Å)."""

    loss: float
    energy_rmse: float
    energy_mae: float
    force_rmse: float
    force_mae: float
    virial_rmse: float | None
    n_frames: int
    n_atoms: int

    def to_dict(self) -> dict:
        """Return the fields as a dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def predict(model, batch: Batch, dtype: torch.dtype, create_graph: bool):
    """Predict the frame energies (B,), forces (N, 3) and virials (B, 3, 3), float64.

    A bridged model takes float64 edge vectors whatever ``dtype``, as in
    :class:`mdband.Potential`.
    """
    ev_dtype = torch.float64 if model.float64_edges else dtype
    ev = batch.edge_vec.to(ev_dtype).detach().requires_grad_(True)
    atom_e = model(batch.types, batch.src, batch.dst, ev).to(torch.float64)
    energy = atom_e.new_zeros(batch.n_frames).index_add(0, batch.atom_frame, atom_e)
    (g,) = torch.autograd.grad(energy.sum(), ev, create_graph=create_graph, allow_unused=True)
    if g is None:
        g = torch.zeros_like(ev)
    g = g.to(torch.float64)
    n = batch.types.shape[0]
    forces = g.new_zeros(n, 3).index_add(0, batch.dst, g).index_add(0, batch.src, -g)
    outer = (g[:, :, None] * ev.detach().to(torch.float64)[:, None, :]).reshape(-1, 9)
    virial = -g.new_zeros(batch.n_frames, 9).index_add(0, batch.edge_frame, outer)
    return energy, forces, virial.reshape(-1, 3, 3)


def loss_terms(pred, batch: Batch, cfg: FitConfig):
    """Return ``(L, energy term, force term, virial term or None)`` of the loss above.

    The terms are unweighted, the total ``L`` weighted.
    """
    energy, forces, virial = pred
    le = (((energy - batch.energy) / batch.n_atoms) ** 2).mean()
    lf = ((forces - batch.forces) ** 2).mean()
    total = cfg.energy_weight * le + cfg.force_weight * lf
    lv = None
    if cfg.virial_weight > 0 and bool(batch.has_virial.any()):
        m = batch.has_virial
        dv = (virial[m] - batch.virial[m]) / batch.n_atoms[m][:, None, None]
        lv = (dv**2).mean()
        total = total + cfg.virial_weight * lv
    return total, le, lf, lv


def batches(frames: list[GraphFrame], order, batch_size: int):
    """Batches of ``batch_size`` frames taken in ``order`` (the last one may be shorter)."""
    for i in range(0, len(order), batch_size):
        yield collate([frames[j] for j in order[i : i + batch_size]])


def evaluate_metrics(model, frames, cfg: FitConfig, dtype, device) -> Metrics | None:
    """Compute the validation loss and errors (no parameter gradients)."""
    if not frames:
        return None
    sq_e = ab_e = sq_f = ab_f = sq_v = 0.0
    n_f = n_v = 0
    loss = 0.0
    for batch in batches(frames, list(range(len(frames))), cfg.batch_size):
        batch = batch.to(device)
        pred = predict(model, batch, dtype, create_graph=False)
        total, *_ = loss_terms(pred, batch, cfg)
        loss += float(total.detach()) * batch.n_frames
        energy, forces, virial = (t.detach() for t in pred)
        de = (energy - batch.energy) / batch.n_atoms
        sq_e += float((de**2).sum())
        ab_e += float(de.abs().sum())
        df = forces - batch.forces
        sq_f += float((df**2).sum())
        ab_f += float(df.abs().sum())
        n_f += df.numel()
        m = batch.has_virial
        if bool(m.any()):
            dv = (virial[m] - batch.virial[m]) / batch.n_atoms[m][:, None, None]
            sq_v += float((dv**2).sum())
            n_v += dv.numel()
    n = len(frames)
    return Metrics(
        loss=loss / n,
        energy_rmse=1e3 * math.sqrt(sq_e / n),
        energy_mae=1e3 * ab_e / n,
        force_rmse=1e3 * math.sqrt(sq_f / n_f),
        force_mae=1e3 * ab_f / n_f,
        virial_rmse=1e3 * math.sqrt(sq_v / n_v) if n_v else None,
        n_frames=n,
        n_atoms=sum(f.n_atoms for f in frames),
    )


def metrics_dict(m: Metrics | None):
    """Return ``m`` as a dict, or None."""
    return None if m is None else m.to_dict()


def metrics_from(d: dict | None) -> Metrics | None:
    """Rebuild :class:`Metrics` from :func:`metrics_dict`'s dict, or None."""
    return None if d is None else Metrics(**d)
