"""Sort the frames of a committee run by their force deviation, as DP-GEN does.

Reads ``model_devi.out`` (deepmd-kit's layout, with ``numpy.loadtxt`` like dpgen / dpgen2) and
counts the steps whose ``max_devi_f`` is below ``--lo`` (accurate), between ``--lo`` and
``--hi`` (candidates for new reference calculations) or above ``--hi`` (failed). The candidate
frames are taken from the H5MD trajectory, whose frames carry the same deviations as
observables, and written as extended XYZ.

Usage::

    python select_frames.py [--lo 0.05] [--hi 0.20] [--max 10] [--output candidates.extxyz]
"""

from __future__ import annotations

import argparse

import ase.io
import numpy as np

from mdband.io.h5md import H5MDReader


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-devi", default="model_devi.out")
    ap.add_argument("--trajectory", default="cuni.h5")
    ap.add_argument("--lo", type=float, default=0.05, help="trust level low, eV/Å")
    ap.add_argument("--hi", type=float, default=0.20, help="trust level high, eV/Å")
    ap.add_argument("--max", type=int, default=10, help="most candidate frames to keep")
    ap.add_argument("--output", default="candidates.extxyz")
    args = ap.parse_args()
    rows = np.loadtxt(args.model_devi, ndmin=2)
    max_f = rows[:, 4]
    accurate, failed = max_f < args.lo, max_f >= args.hi
    print(
        f"{len(rows)} steps: {accurate.sum()} accurate, {(~accurate & ~failed).sum()} "
        f"candidates, {failed.sum()} failed (max_devi_f {max_f.min():.3f}-{max_f.max():.3f} eV/A)"
    )
    with H5MDReader(args.trajectory) as traj:
        devi = traj.observable("max_devi_f")
        picked = [i for i, d in enumerate(devi) if args.lo <= d < args.hi][: args.max]
        frames = [traj.to_atoms(i) for i in picked]
        steps = [int(traj.steps[i]) for i in picked]
    ase.io.write(args.output, frames, format="extxyz")
    print(f"{args.output}: {len(frames)} candidate frame(s), steps {steps}")


if __name__ == "__main__":
    main()
