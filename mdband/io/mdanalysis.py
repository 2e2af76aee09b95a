"""An MDAnalysis ``Universe`` of an mdband H5MD trajectory, without a topology file.

MDAnalysis reads the H5MD data itself (``format="H5MD"``; it does not know the ``.h5``
suffix) but needs a topology for the atoms and does not read the frame interval from H5MD
(``dt`` defaults to 1 ps with a warning). :func:`universe` supplies both from the file::

    u = mdband.io.mdanalysis.universe("run.h5")

The plain MDAnalysis spelling, with the final structure of the run as the topology, is
``mda.Universe("run.final.xyz", "run.h5", format="H5MD", dt=DT_PS)``. Positions are
folded into the box (H5MD ``image`` holds the unwrapping shifts, which MDAnalysis does not
read). Forces come in MDAnalysis' unit, kJ mol⁻¹ Å⁻¹, whatever ``traj_force_unit`` the run
wrote: MDAnalysis converts ``kJ mol-1 Angstrom-1``, ``kcal mol-1 Angstrom-1`` and
``kJ mol-1 nm-1`` itself; ``eV Angstrom-1``, which MDAnalysis' H5MD reader does not know,
is read by :func:`reader_class` (MDAnalysis' reader that also knows eV Å⁻¹), what
:func:`universe` uses, or ``mda.Universe(..., format=mdband.io.mdanalysis.reader_class())``.
"""

from __future__ import annotations

import numpy as np
from ase.data import chemical_symbols

from mdband.io.h5md_reader import H5MDReader as _MdbandReader

__all__ = ["reader_class", "universe"]
_READER: list[type] = []


def reader_class():
    """Return MDAnalysis' H5MD reader class, extended to convert forces stored in eV Å⁻¹.

    Pass it as ``format=`` to ``MDAnalysis.Universe``; the same class on every call.
    """
    if not _READER:
        _READER.append(_make_reader())
    return _READER[0]


def _make_reader():
    from MDAnalysis import units
    from MDAnalysis.coordinates.H5MD import H5MDReader as MdaReader

    translation = {**MdaReader._unit_translation}
    translation["force"] = {**translation["force"], "eV Angstrom-1": "eV/Angstrom"}
    kj_mol_per_ev = 1.0 / units.energyUnit_factor["eV"]

    class EvH5MDReader(MdaReader):
        """MDAnalysis' H5MD reader that also converts forces in eV Å⁻¹.

        It has no ``format`` attribute: MDAnalysis does not register it for a file type.
        """

        _unit_translation = translation

        def convert_forces_from_native(self, force, inplace=True):
            if self.units.get("force") != "eV/Angstrom":
                return super().convert_forces_from_native(force, inplace)
            if inplace:
                force *= kj_mol_per_ev
                return force
            return force * kj_mol_per_ev

    return EvH5MDReader


def universe(path, **kwargs):
    """Open an ``MDAnalysis.Universe`` of ``path`` with elements, names, types, masses, ``dt``.

    Forces come in kJ mol⁻¹ Å⁻¹ for every force unit mdband writes.

    ``kwargs`` go to the H5MD reader (e.g. ``convert_units=False`` keeps the file's units).
    """
    import MDAnalysis as mda

    with _MdbandReader(path) as r:
        species, masses = r.species, r.masses
        times = r.times
    symbols = np.array([chemical_symbols[z] for z in species], dtype=object)
    u = mda.Universe.empty(len(species), trajectory=False)
    for name in ("elements", "names", "types"):
        u.add_TopologyAttr(name, symbols)
    u.add_TopologyAttr("masses", np.asarray(masses, dtype=np.float64))
    if len(times) > 1:
        kwargs.setdefault("dt", float(times[1] - times[0]))
    u.load_new(str(path), format=reader_class(), **kwargs)
    return u
