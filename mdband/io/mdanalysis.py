"""An MDAnalysis ``Universe`` of an mdband H5MD trajectory, without a topology file.

MDAnalysis reads the H5MD data itself (``format="H5MD"``; it does not know the ``.h5``
suffix) but needs a topology for the atoms and does not read the frame interval from H5MD
(``dt`` defaults to 1 ps with a warning). :func:`universe` supplies both from the file::

    u = mdband.io.mdanalysis.universe("run.h5")

The plain MDAnalysis spelling, with the final structure of the run as the topology, is
``mda.Universe("run.final.xyz", "run.h5", format="H5MD", dt=DT_PS)``. Positions are
folded into the box (H5MD ``image`` holds the unwrapping shifts, which MDAnalysis does not
read); forces are in kJ mol⁻¹ Å⁻¹ unless the run chose ``traj_force_unit = "eV Angstrom-1"``,
in which case units are left unconverted (MDAnalysis knows no eV-based force unit).
"""

from __future__ import annotations

import numpy as np
from ase.data import chemical_symbols

from mdband.io.h5md_reader import H5MDReader


def universe(path, **kwargs):
    """``MDAnalysis.Universe`` of ``path`` with elements, names, types, masses and ``dt``.

    ``kwargs`` go to the H5MD reader (e.g. ``convert_units``).
    """
    import MDAnalysis as mda

    with H5MDReader(path) as r:
        species, masses, force_unit = r.species, r.masses, r.force_unit
        times = r.times
    symbols = np.array([chemical_symbols[z] for z in species], dtype=object)
    u = mda.Universe.empty(len(species), trajectory=False)
    for name in ("elements", "names", "types"):
        u.add_TopologyAttr(name, symbols)
    u.add_TopologyAttr("masses", np.asarray(masses, dtype=np.float64))
    kwargs.setdefault("convert_units", force_unit == "kJ mol-1 Angstrom-1")
    if len(times) > 1:
        kwargs.setdefault("dt", float(times[1] - times[0]))
    u.load_new(str(path), format="H5MD", **kwargs)
    return u
