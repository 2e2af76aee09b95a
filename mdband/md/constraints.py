"""ASE constraints in ``mdband run``: which are carried and how a checkpoint stores them.

This module says which constraints are carried, why the others are refused, and how they are
stored in a checkpoint (so a resumed run continues with the same constraints).

Carried: ``FixAtoms``, ``FixCartesian`` (held coordinates) and ``FixCom`` (centre of mass at
rest). ASE's integrators apply them (positions, momenta and forces are adjusted) and
``Atoms.get_temperature`` counts the degrees of freedom they remove; none has state that
evolves, so the checkpoint stores their ``todict()`` and a resumed run rebuilds them.
"""

from __future__ import annotations

import json

from ase import Atoms
from ase.constraints import dict2constraint
from ase.io.jsonio import decode, encode

from mdband.errors import StructureError
from mdband.io.checkpoint import CheckpointError
from mdband.md.config import RunConfig

CARRIED = ("FixAtoms", "FixCartesian", "FixCom")

_EXTERNAL = "adds forces and energy that the model does not compute"
_HOLONOMIC = "a holonomic (bond, angle, line or plane) constraint not validated with mdband run"
# why each of ASE's other constraints is refused (a type not listed gets the generic reason)
_REFUSED = {
    "Hookean": _EXTERNAL,
    "ExternalForce": _EXTERNAL,
    "MirrorForce": _EXTERNAL + " (meant for transition-state searches)",
    "MirrorTorque": _EXTERNAL + " (meant for transition-state searches)",
    "FixSymmetry": "it symmetrises forces and stress for relaxations (use mdband relax)",
    "FixScaled": "it fixes scaled coordinates, which move with the cell",
    "FixSubsetCom": "only the whole system's centre of mass (FixCom) is carried",
    "FixBondLength": _HOLONOMIC,
    "FixBondLengths": _HOLONOMIC,
    "FixLinearTriatomic": _HOLONOMIC,
    "FixInternals": _HOLONOMIC,
    "FixedLine": _HOLONOMIC,
    "FixedPlane": _HOLONOMIC,
    "FixedMode": _HOLONOMIC,
}
# ensembles that cannot honour any constraint, and why
_ENSEMBLE_REASONS = {
    "nvt-nhc": "ASE's NoseHooverChainNVT thermostats 3N degrees of freedom, ignoring the "
    "ones a constraint removes",
    "npt-mtk": "ASE's MTK barostats do not support constraints",
}


def carried_constraints(constraints, config: RunConfig, source: str) -> list:
    """Return the constraints of a structure, checking that ``config``'s run can honour them.

    Raises :class:`StructureError` naming the first one it cannot, and why.
    """
    constraints = list(constraints or [])
    for c in constraints:
        name = type(c).__name__
        if name not in CARRIED:
            reason = _REFUSED.get(name, "mdband run does not know it")
            raise StructureError(
                f"structure {source} carries an ASE {name} constraint, which mdband run does "
                f"not support: {reason} (supported: {', '.join(CARRIED)})"
            )
    if not constraints:
        return []
    names = ", ".join(sorted({type(c).__name__ for c in constraints}))
    if config.engine != "ase":
        raise StructureError(
            f"structure {source} carries ASE constraints ({names}); --engine {config.engine} "
            "does not carry them (use --engine ase)"
        )
    why_not = _ENSEMBLE_REASONS.get(config.ensemble)
    if why_not is not None:
        raise StructureError(
            f"structure {source} carries ASE constraints ({names}), which ensemble "
            f"{config.ensemble} cannot honour: {why_not} (use nve, nvt-langevin or nvt-bussi)"
        )
    return constraints


def describe(atoms: Atoms) -> str:
    """Return a note on the constraints for the run's header.

    For example ``Constraints: FixAtoms (12 degrees of freedom ...``.
    """
    names = ", ".join(dict.fromkeys(type(c).__name__ for c in atoms.constraints))
    removed = 3 * len(atoms) - atoms.get_number_of_degrees_of_freedom()
    return f"Constraints: {names} ({removed} degrees of freedom removed; kept in checkpoints)"


def constraints_json(atoms: Atoms) -> str:
    """``atoms``' constraints as JSON (what a checkpoint stores; ``"[]"`` when none)."""
    return encode([c.todict() for c in atoms.constraints])


def restore_constraints(atoms: Atoms, text: str, config: RunConfig, source: str) -> None:
    """Set the constraints a checkpoint recorded (``constraints_json``) on ``atoms``."""
    try:
        dicts = decode(text or "[]")
        constraints = [dict2constraint(d) for d in dicts]
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {source} has unreadable constraints ({exc})") from None
    constraints = carried_constraints(constraints, config, source)
    if constraints:
        atoms.set_constraint(constraints)
