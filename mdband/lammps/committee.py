"""``pair_style mdband a.pt b.pt c.pt out_freq N out_file FILE [atomic]``: a committee in LAMMPS.

The first model gives LAMMPS its energy, forces and virials; every ``out_freq`` steps (or when
``fix pair ... mdband devi_f 1`` asks) every model is evaluated on the same edge list (built by
the plugin for the largest cutoff; a model with a smaller cutoff gets the edges within its own)
and each rank reduces its share of the deviations:

* the forces of every model on the rank's local atoms are completed with the contributions of
  their ghost images on other ranks (one LAMMPS reverse communication of all models' forces);
  the per-atom force deviation ``ε_F,i`` of the local atoms gives max, min and sum;
* every model's virial of the rank's edges (3×3); the ranks' virials sum to the total.

The plugin reduces these over the ranks (MPI max, min, sum) and rank 0 calls
:meth:`CommitteeModel.write_deviation`, which applies deepmd-kit's definitions
(:func:`mdband.committee.deviation.from_partials`) and writes ``model_devi.out``.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np

from mdband.committee.devi_file import ModelDeviFileError, ModelDeviWriter
from mdband.committee.deviation import force_deviation, from_partials
from mdband.lammps.model import LammpsModel

# model-deviation files this process writes (a re-issued pair_coeff continues them)
_WRITERS: dict[str, ModelDeviWriter] = {}
MODES = ("new", "append", "overwrite")
ROW_POLICIES = ("repeat", "continue")


class CommitteeModel(LammpsModel):
    """A committee as ``pair_style mdband`` sees it (first model = the dynamics).

    ``options`` (from the plugin): ``out_file``, ``out_freq``, ``atomic``, ``mode`` ("new":
    refuse an existing file, "append": continue it, "overwrite"), ``restart`` (the pair style
    came from a restart file: "new" continues the file too, as ``pair_style deepmd`` does) and
    ``restart_rows``, how a continued file goes on: "repeat" (deepmd-kit's: every row kept, the
    first step written again, as a LAMMPS dump appended to after ``read_restart`` writes its
    first frame again, so row k is frame k) or "continue" (rows after the current ``step``
    dropped, the current step not written twice: one row per step).
    """

    def __init__(self, potentials, types_per_model, options: dict | None = None) -> None:
        each = [dict(options or {}) for _ in potentials]
        if any(p.charge_spin is not None for p in potentials):
            for o, p in zip(each, potentials):  # given to every model that takes them
                if p.charge_spin is None:
                    o.pop("charge", None), o.pop("spin", None)
        super().__init__(potentials[0], types_per_model[0], each[0])
        self.members = [
            LammpsModel(p, t, o) for p, t, o in zip(potentials[1:], types_per_model[1:], each[1:])
        ]
        for m in self.members:
            m.announce = False
        self.n_models = len(potentials)
        self.first_cutoff = float(potentials[0].cutoff)
        self.cutoff = max(float(p.cutoff) for p in potentials)  # the plugin's edge cutoff
        opts = self.options
        self.out_file = str(opts.get("out_file") or "model_devi.out")
        self.out_freq = int(opts.get("out_freq", 100))
        self.atomic = bool(opts.get("atomic", 0))
        self.mode = str(opts.get("mode") or "new")
        if self.mode not in MODES:
            raise ModelDeviFileError(f"model deviation file mode must be one of {MODES}")
        self.restart = bool(opts.get("restart", 0))
        self.restart_rows = str(opts.get("restart_rows") or "repeat")
        if self.restart_rows not in ROW_POLICIES:
            raise ModelDeviFileError(f"restart_rows must be one of {ROW_POLICIES}")
        self.writer: ModelDeviWriter | None = None
        self.last_deviation = None

    # ------------------------------------------------------------------ output (rank 0)
    def open_output(self) -> None:
        """Open the model-deviation file (rank 0 only)."""
        path = Path(self.out_file)
        key = str(path.resolve())
        writer = _WRITERS.get(key)
        if writer is not None and not writer._fh.closed:
            if writer.atomic != self.atomic:
                raise ModelDeviFileError(f"{path} is already written with other columns")
            self.writer = writer
            return
        if self.mode == "append" or (self.restart and self.mode == "new"):
            if self.restart_rows == "repeat":
                writer = ModelDeviWriter.extend(path, self.atomic)
            else:
                step = int(self.options.get("step", 0))
                writer = ModelDeviWriter.resume(path, step, self.atomic)
        else:
            try:
                writer = ModelDeviWriter.create(path, self.atomic, self.mode == "overwrite")
            except ModelDeviFileError:
                raise ModelDeviFileError(
                    f"model deviation file {path} exists; remove it, choose another out_file, "
                    "or add 'append' (continue it) or 'overwrite' to the pair_style line"
                ) from None
        _WRITERS[key] = self.writer = writer

    def write_deviation(self, step, f_max, f_min, f_sum, n_atoms, virials, atom_devi=None):
        """Rank 0: one row from the deviations reduced over all ranks."""
        v = np.frombuffer(virials, dtype=np.float64).reshape(self.n_models, 3, 3)
        devi_f = None if atom_devi is None else np.frombuffer(atom_devi, dtype=np.float64)
        devi = from_partials(f_max, f_min, f_sum, int(n_atoms), v, devi_f)
        self.last_deviation = devi
        if self.writer is not None:
            self.writer.write(int(step), devi)

    # ------------------------------------------------------------------ evaluation
    def compute(
        self,
        nlocal,
        nghost,
        types,
        src,
        dst,
        vec,
        forces,
        eatom,
        vatom,
        out,
        devi=None,
        devi_atom=None,
    ) -> None:
        """Evaluate the committee; the first model's results go into the plugin's buffers.

        With ``devi`` (float64, 3 + 9·M) also this rank's deviation partials: max, min and sum
        of ``ε_F`` over its local atoms, then every model's 3×3 virial; ``devi_atom`` (nlocal,)
        receives ``ε_F`` of the local atoms.
        """
        n_all = nlocal + nghost
        src_np = np.frombuffer(src, dtype=np.int64)
        dst_np = np.frombuffer(dst, dtype=np.int64)
        vec_np = np.frombuffer(vec, dtype=np.float64).reshape(-1, 3)
        edges: tuple[np.ndarray, np.ndarray, np.ndarray] = (src_np, dst_np, vec_np)
        first = edges if self.first_cutoff == self.cutoff else _within(edges, self.first_cutoff)
        super().compute(nlocal, nghost, types, *first, forces, eatom, vatom, out)
        if devi is None:
            return
        f_all = [np.frombuffer(forces, dtype=np.float64).reshape(n_all, 3).copy()]
        virials = [self.last_virial]
        for m in self.members:
            m.lammps_handle, m._backend = self.lammps_handle, self._backend
            m_edges = edges if m.cutoff == self.cutoff else _within(edges, m.cutoff)
            f = np.zeros((n_all, 3))
            scratch = np.zeros(7)
            m.compute(nlocal, nghost, types, *m_edges, f, None, None, scratch)
            f_all.append(f)
            virials.append(m.last_virial)
        rows = np.ascontiguousarray(np.concatenate(f_all, axis=1))  # (n_all, 3M)
        if self.last_path == "exchange" and n_all > nlocal:
            # ghost images' forces to their owners (all ranks take this path together)
            backend = self._backend_now()
            if backend is not None:
                backend(rows, True)
        local = rows[:nlocal].reshape(nlocal, self.n_models, 3).transpose(1, 0, 2)
        eps = force_deviation(local)
        buf = np.frombuffer(devi, dtype=np.float64)
        buf[0] = eps.max() if nlocal else 0.0
        buf[1] = eps.min() if nlocal else np.inf
        buf[2] = eps.sum()
        buf[3:] = np.stack(cast(list[np.ndarray], virials)).reshape(-1)  # set by each compute
        if devi_atom is not None:
            np.frombuffer(devi_atom, dtype=np.float64)[:nlocal] = eps


def _within(edges, cutoff: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keep the edges (src, dst, vec) shorter than ``cutoff``, in their order."""
    src, dst, vec = edges
    keep = np.flatnonzero(np.einsum("ij,ij->i", vec, vec) < cutoff * cutoff)
    return (
        np.ascontiguousarray(src[keep]),
        np.ascontiguousarray(dst[keep]),
        np.ascontiguousarray(vec[keep]),
    )
