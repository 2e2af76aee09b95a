"""Initial velocities of a fresh run: from the structure file, or Maxwell-Boltzmann.

Maxwell-Boltzmann velocities are set at exactly the target temperature (ASE's ``Stationary``,
``ZeroRotation`` and ``force_temperature``).
"""

from __future__ import annotations

import numpy as np
from ase import Atoms
from ase.md.velocitydistribution import Stationary, ZeroRotation, force_temperature

from mdband.errors import StructureError
from mdband.md.config import RunConfig
from mdband.md.ensembles import velocity_rng
from mdband.md.system import has_velocities, maxwell_boltzmann_momenta


def set_initial_velocities(atoms: Atoms, src: Atoms, config: RunConfig) -> str:
    """Give ``atoms`` (with their constraints set) the momenta ``config.velocities`` asks for.

    ``file`` takes the structure file's velocities as they are (constraints applied);
    ``maxwell`` draws from ``config.seed`` at ``config.temperature`` (K), removes the total
    momentum (unless constraints hold atoms, which make it not conserved) and, for an open
    system, the rigid rotation, then scales to exactly ``config.temperature`` over the degrees
    of freedom :meth:`ase.Atoms.get_temperature` counts (3N minus the constrained ones), so
    step 0 reads the target. ``auto`` is ``file`` when the file has velocities, else
    ``maxwell``. Returns the note for the run's header.
    """
    mode = config.velocities
    if mode == "file" and not has_velocities(src):
        raise StructureError(
            f"structure {config.structure} has no velocities (--velocities file); "
            "use --velocities maxwell"
        )
    if mode == "file" or (mode == "auto" and has_velocities(src)):
        atoms.set_momenta(src.get_momenta(), apply_constraint=True)
        return f"Velocities: taken from the structure file ({atoms.get_temperature():.2f} K)"
    rng = velocity_rng(config.seed)
    atoms.set_momenta(
        maxwell_boltzmann_momenta(atoms.get_masses(), config.temperature, rng),
        apply_constraint=True,
    )
    done = []
    if len(atoms) > 1 and not _holds_atoms(atoms):
        Stationary(atoms, preserve_temperature=False)
        done.append("zero total momentum")
        if not np.any(atoms.get_pbc()):
            # ASE divides by every principal moment before discarding the zero ones (linear
            # molecules); silence that warning, the result is finite
            with np.errstate(divide="ignore", invalid="ignore"):
                ZeroRotation(atoms, preserve_temperature=False)
            done.append("zero angular momentum")
    if config.temperature > 0 and atoms.get_kinetic_energy() > 0:
        force_temperature(atoms, config.temperature)
    dof = atoms.get_number_of_degrees_of_freedom()
    return (
        f"Velocities: Maxwell-Boltzmann (seed {config.seed}) scaled to {config.temperature} K "
        f"over {dof} degrees of freedom" + "".join(f", {d}" for d in done)
    )


def _holds_atoms(atoms: Atoms) -> bool:
    """Tell whether a constraint holds some atoms in place (the total momentum then changes)."""
    return any(type(c).__name__ != "FixCom" for c in atoms.constraints)
