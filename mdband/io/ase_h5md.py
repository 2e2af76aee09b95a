"""ASE io plugin: ``ase.io.read("traj.h5", ":")`` reads mdband H5MD trajectories.

ASE finds the format through the ``ase.ioformats`` entry point ``mdband-h5md`` (declared in
``pyproject.toml``; its :class:`~ase.utils.plugins.ExternalIOFormat` lives in the top-level
module ``mdband_ase_plugin``, so ``import ase.io`` does not import torch). Files named
``*.h5`` / ``*.h5md`` or starting with the HDF5 signature are read as ``mdband-h5md``.
:func:`register` defines the format by hand where the entry point is not installed (an
editable install made before the entry point existed).

Each frame is an :class:`ase.Atoms` with cell, pbc, masses, velocities, continuous
(unwrapped) positions, and energy and forces on a single-point calculator; ``info`` holds
``step``, ``time`` (ps) and the scalar observables.
"""

from __future__ import annotations

FORMAT_NAME = "mdband-h5md"


def read_mdband_h5md(filename, index=None):
    """Yield the frames of ``filename`` selected by ``index`` (a slice; default: all)."""
    from mdband.io.h5md_reader import H5MDReader

    with H5MDReader(filename) as reader:
        for k in reader.indices(slice(None) if index is None else index):
            yield reader.to_atoms(k)


def register() -> bool:
    """Define ``mdband-h5md`` in ASE's format table unless it is there; True if added."""
    from ase.io import formats

    from mdband_ase_plugin import mdband_h5md

    if FORMAT_NAME in formats.ioformats:
        return False
    formats.define_io_format(FORMAT_NAME, **mdband_h5md._asdict(), external=True)
    return True
