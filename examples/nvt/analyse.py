"""Read the example's trajectory back: temperature and energies per frame, final structure.

Usage: python analyse.py [nvt.h5]
"""

import sys

import numpy as np

from mdband.io.h5md import H5MDReader

path = sys.argv[1] if len(sys.argv) > 1 else "nvt.h5"
with H5MDReader(path) as traj:
    temp = traj.observable("temperature")
    epot = traj.observable("potential_energy")
    cons = traj.observable("conserved_energy")
    print(f"{len(traj)} frames of {traj.n_atoms} atoms, steps {traj.steps[0]}..{traj.steps[-1]}")
    half = len(temp) // 2
    print(f"<T> over the second half: {temp[half:].mean():.1f} K (target 90 K)")
    print(f"<Epot>/atom over the second half: {epot[half:].mean() / traj.n_atoms:.5f} eV")
    slope = np.polyfit(traj.times, cons, 1)[0] / traj.n_atoms
    print(f"drift of the Bussi conserved energy: {slope:.2e} eV/atom/ps")
    last = traj.to_atoms(-1)
    last.write("final.extxyz")
    print("wrote final.extxyz (open it in OVITO / ASE)")
