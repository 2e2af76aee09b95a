"""ASE calculator of a committee: the first model's results plus the models' deviations."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ase.calculators.calculator import all_changes

from mdband.calculator import Calculator
from mdband.committee.committee import Committee
from mdband.committee.deviation import COLUMNS, ModelDeviation
from mdband.potential import Potential

DEVIATION_PROPERTIES = [*COLUMNS, "devi_e", "devi_f"]


class CommitteeCalculator(Calculator):
    """ASE calculator of a committee: the first model's results plus the committee's deviations.

    Its energy, forces and stress are the first model's, bit for bit what
    :class:`mdband.Calculator` gives for that model alone, and its ``results`` also hold the
    committee's deviations (deepmd-kit's definitions, see :mod:`mdband.committee.deviation`):
    ``max_devi_v``, ``min_devi_v``, ``avg_devi_v``, ``devi_e`` (eV), ``max_devi_f``,
    ``min_devi_f``, ``avg_devi_f`` (eV/Å) and the per-atom ``devi_f`` (N,).

    Parameters
    ----------
    models : sequence of Potential or paths
        At least two; the first one gives the energy, forces and stress.
    device, dtype, head
        Used to load model paths (as :class:`mdband.Calculator`).
    skin : float
        Verlet skin of the first model's neighbour list (Å); see :class:`mdband.Calculator`.
    deviations : bool, default True
        Evaluate the whole committee in every calculation. With False only the first model is
        evaluated, and :meth:`model_deviation` evaluates the others on demand (what
        ``mdband run`` does every ``model_devi_every`` steps).
    """

    implemented_properties = [*Calculator.implemented_properties, *DEVIATION_PROPERTIES]

    def __init__(
        self,
        models: Sequence[Potential | str],
        device: str | None = None,
        dtype: str | None = None,
        *,
        skin: float = 0.0,
        head: str | None = None,
        deviations: bool = True,
        **kwargs,
    ) -> None:
        models = list(models)
        if all(isinstance(m, Potential) for m in models):
            pots = [m for m in models if isinstance(m, Potential)]
        else:
            from mdband.loader import load_model

            pots = [
                m
                if isinstance(m, Potential)
                else load_model(m, device=device, dtype=dtype or "float32", head=head)
                for m in models
            ]
        self.committee = Committee(pots)
        super().__init__(pots[0], device, dtype, skin=skin, **kwargs)
        self.deviations = bool(deviations)
        # (first model's Result, graph, positions, cell, pbc, numbers, charge, spin)
        self._frame: tuple | None = None
        self.n_committee_evaluations = 0

    def _evaluate(self, positions, cell, pbc, numbers, magmoms=None, atom_virial=False,
                  charge=None, spin=None):  # fmt: skip
        # the list Calculator.calculate would use (same edges, so the same bits); magmoms is
        # always None: a committee refuses spin models (Committee)
        graph = self.potential.edges(positions, cell, pbc, self._neighbours)
        cs = {"charge": charge, "spin": spin} if self.potential.charge_spin is not None else {}
        res = self.potential.evaluate(
            positions, cell, pbc, numbers, graph=graph, atom_virial=atom_virial, **cs
        )
        self._frame = (res, graph, positions, cell, pbc, numbers, charge, spin)
        return res

    def charge_spin(self, atoms) -> dict:
        """Return ``atoms.info``'s charge and spin when any model of the committee takes them.

        Each model gets them only if it does (:meth:`Committee.evaluate`).
        """
        if all(p.charge_spin is None for p in self.committee.potentials):
            return {}
        return {"charge": atoms.info.get("charge"), "spin": atoms.info.get("spin")}

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes) -> None:
        """Calculate as :class:`mdband.Calculator`, adding the committee's deviations if asked.

        The deviations are added when ``deviations`` is on or a deviation property is requested.
        """
        super().calculate(atoms, properties, system_changes)
        if self.deviations or set(properties) & set(DEVIATION_PROPERTIES):
            self._add_deviation()

    def _add_deviation(self) -> ModelDeviation:
        assert self._frame is not None  # set by _evaluate, which calculate ran first
        res, graph, positions, cell, pbc, numbers, charge, spin = self._frame
        out = self.committee.evaluate(positions, cell, pbc, numbers, graph=graph, first=res,
                                      charge=charge, spin=spin)  # fmt: skip
        self.n_committee_evaluations += 1
        devi = out.deviation
        self.results.update(devi.as_dict())
        self.results["devi_e"] = devi.devi_e
        self.results["devi_f"] = np.asarray(devi.devi_f, dtype=np.float64)
        return devi

    def model_deviation(self, atoms=None) -> ModelDeviation:
        """Return the deviations of ``atoms`` (default: the last calculated atoms).

        The committee is evaluated if this frame's deviations are not known yet.
        """
        self.get_property("forces", atoms)  # the first model's results of this frame
        if "max_devi_f" in self.results:
            r = self.results
            columns = {name: float(r[name]) for name in COLUMNS}
            return ModelDeviation(**columns, devi_f=r["devi_f"], devi_e=r["devi_e"])
        return self._add_deviation()
