"""The errors ``mdband test`` reports: deepmd-kit's ``dp test`` quantities, names and layout.

Every quantity is an MAE or an RMSE with the number of elements it was taken over (its
weight), so errors of several systems (or chunks) combine exactly, as deepmd-kit's
``merge_weighted_errors`` does: MAEs average weighted by their weights, RMSEs as the root of
the weighted mean of their squares. Keys and report lines are deepmd-kit 3.2's
(``deepmd/infer/model_test/ener.py``, ``deepmd/utils/eval_metrics.py``):

=========================  ===========================================  ===================
key                        what (prediction − label)                    weight
=========================  ===========================================  ===================
``mae_e`` ``rmse_e``       energy, eV                                   frames
``mae_ea`` ``rmse_ea``     energy / N, eV                               frames
``mae_f`` ``rmse_f``       force components, eV/Å                       3 N per frame
``mae_v`` ``rmse_v``       virial components, eV (periodic systems)     9 per frame
``mae_va`` ``rmse_va``     virial / N, eV                               9 per frame
``mae_s`` ``rmse_s``       stress −W/V components, eV/Å³                9 per frame
=========================  ===========================================  ===================

A quantity is reported for a system when its frames carry the label (virials only for
systems periodic in every direction, as ``dp test`` does); frames without it are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np

#: (key, report line) in deepmd-kit's order; ``{}`` takes the value as ``{:e}``
REPORT = (
    ("mae_e", "Energy MAE         : {} eV"),
    ("rmse_e", "Energy RMSE        : {} eV"),
    ("mae_ea", "Energy MAE/Natoms  : {} eV"),
    ("rmse_ea", "Energy RMSE/Natoms : {} eV"),
    ("mae_f", "Force  MAE         : {} eV/Å"),
    ("rmse_f", "Force  RMSE        : {} eV/Å"),
    ("mae_v", "Virial MAE         : {} eV"),
    ("rmse_v", "Virial RMSE        : {} eV"),
    ("mae_va", "Virial MAE/Natoms  : {} eV"),
    ("rmse_va", "Virial RMSE/Natoms : {} eV"),
    ("mae_s", "Stress MAE         : {} eV/Å³"),
    ("rmse_s", "Stress RMSE        : {} eV/Å³"),
)
KEYS = tuple(k for k, _ in REPORT)

Errors = dict[str, tuple[float, float]]


def error_pair(prediction, reference, scale: float = 1.0) -> tuple[float, float, float]:
    """Return ``(mae, rmse, weight)`` of ``prediction − reference`` (times ``scale``).

    As deepmd-kit's ``compute_error_stat``: the scale multiplies the MAE and the RMSE of the raw
    difference.
    """
    diff = np.asarray(prediction, dtype=np.float64) - np.asarray(reference, dtype=np.float64)
    mae = float(np.mean(np.abs(diff)))
    rmse = float(np.sqrt(np.mean(diff * diff)))
    return mae * scale, rmse * scale, float(diff.size)


def _put(errors: Errors, name: str, stat: tuple[float, float, float]) -> None:
    mae, rmse, weight = stat
    errors[f"mae_{name}"] = (mae, weight)
    errors[f"rmse_{name}"] = (rmse, weight)


def _per_atom(pred: np.ndarray, ref: np.ndarray, n_atoms: np.ndarray):
    """Return :func:`error_pair` of per-atom values.

    This is deepmd-kit's scale 1/N where every frame has N atoms, else each frame's difference
    divided by its own atom count.
    """
    if np.all(n_atoms == n_atoms[0]):
        return error_pair(pred, ref, 1.0 / float(n_atoms[0]))
    shape = (-1,) + (1,) * (pred.ndim - 1)
    return error_pair(pred / n_atoms.reshape(shape), ref / n_atoms.reshape(shape))


def system_errors(frames, results) -> Errors:
    """Compute the errors of one system from its labelled frames and the model's results.

    ``frames`` are :class:`~mdband.io.frames.Frame` objects and ``results`` the model's
    :class:`~mdband.result.Result` of each (in the same order).
    """
    errors: Errors = {}
    n_atoms = np.array([f.n_atoms for f in frames], dtype=np.float64)
    have_e = [k for k, f in enumerate(frames) if f.energy is not None]
    if have_e:
        pred = np.array([results[k].energy for k in have_e]).reshape(-1, 1)
        ref = np.array([frames[k].energy for k in have_e], dtype=np.float64).reshape(-1, 1)
        _put(errors, "e", error_pair(pred, ref))
        _put(errors, "ea", _per_atom(pred, ref, n_atoms[have_e]))
    have_f = [k for k, f in enumerate(frames) if f.forces is not None]
    if have_f:
        pred = np.concatenate([results[k].forces.reshape(-1) for k in have_f])
        ref = np.concatenate([np.asarray(frames[k].forces, np.float64).reshape(-1)
                              for k in have_f])  # fmt: skip
        _put(errors, "f", error_pair(pred, ref))
    periodic = all(bool(np.all(f.pbc)) for f in frames)
    have_v = [k for k, f in enumerate(frames) if f.virial is not None] if periodic else []
    if have_v:
        pred = np.stack([results[k].virial.reshape(9) for k in have_v])
        ref = np.stack([np.asarray(frames[k].virial, np.float64).reshape(9) for k in have_v])
        _put(errors, "v", error_pair(pred, ref))
        _put(errors, "va", _per_atom(pred, ref, n_atoms[have_v]))
        volume = np.abs(np.linalg.det(np.stack([frames[k].cell for k in have_v])))
        ok = volume > 0.0
        if ok.any():
            scale = -1.0 / volume[ok, None]
            _put(errors, "s", error_pair(pred[ok] * scale, ref[ok] * scale))
    return errors


def merge(errors: Iterable[Mapping[str, tuple[float, float]]]) -> Errors:
    """Errors of several parts combined (deepmd-kit's ``merge_weighted_errors``)."""
    total: dict[str, float] = {}
    weight: dict[str, float] = {}
    for part in errors:
        for key, (value, w) in part.items():
            term = value * w if key.startswith("mae") else value * value * w
            total[key] = total.get(key, 0.0) + term
            weight[key] = weight.get(key, 0.0) + w
    out: Errors = {}
    for key, t in total.items():
        mean = t / weight[key]
        out[key] = (mean if key.startswith("mae") else math.sqrt(mean), weight[key])
    return out


def report_lines(errors: Mapping[str, tuple[float, float]]) -> list[str]:
    """deepmd-kit's report lines of the quantities in ``errors``, in its order."""
    return [line.format(f"{errors[key][0]:e}") for key, line in REPORT if key in errors]
