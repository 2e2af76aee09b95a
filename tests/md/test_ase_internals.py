"""The ASE internals mdband relies on, named one by one (ASE 3.29 documents no public way).

Exact restarts save and restore the evolving state of ASE's integrators
(:data:`mdband.md.ensembles.STATE_ATTRIBUTES`); ``--engine lammps`` switches ASE's MPI world to a
serial one on rank 0 (:func:`mdband.md.lammps_ranks.serial_ase`). Neither is public API, so
``pyproject.toml`` bounds ``ase`` above. When a new ASE release fails here, adapt
``mdband/md/ensembles.py`` (or ``lammps_ranks.py``) to it, then raise the bound.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import ase
import ase.parallel
import numpy as np
import pytest
from ase.build import bulk
from ase.calculators.lj import LennardJones

from mdband.md.config import RunConfig
from mdband.md.ensembles import STATE_ATTRIBUTES, Ensemble, thermostat_rng

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TCHAIN, PCHAIN = 3, 2
# every private (or undocumented) attribute read or written, and its shape
EXPECTED = {
    "nve": {},
    "nvt-langevin": {},
    "nvt-bussi": {"transferred_energy": ()},
    "nvt-nhc": {"_thermostat._eta": (TCHAIN,), "_thermostat._p_eta": (TCHAIN,)},
    "npt-mtk/isotropic": {
        "_thermostat._eta": (TCHAIN,),
        "_thermostat._p_eta": (TCHAIN,),
        "_barostat._xi": (PCHAIN,),
        "_barostat._p_xi": (PCHAIN,),
        "_eps": (),
        "_p_eps": (),
        "_cell0": (3, 3),
        "_volume0": (),
    },
    "npt-mtk/full": {
        "_thermostat._eta": (TCHAIN,),
        "_thermostat._p_eta": (TCHAIN,),
        "_barostat._xi": (PCHAIN,),
        "_barostat._p_xi": (PCHAIN,),
        "_p_g": (3, 3),
        "_h": (3, 3),
    },
}
CASES = [(key, attr) for key, attrs in EXPECTED.items() for attr in attrs]


def _ensemble(key: str) -> Ensemble:
    ensemble, _, barostat = key.partition("/")
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    atoms.set_momenta(np.random.default_rng(2).normal(0.0, 0.3, (len(atoms), 3)))
    atoms.calc = LennardJones(sigma=3.4, epsilon=0.0104, rc=6.0, smooth=True)
    config = RunConfig(
        structure="unused.xyz",
        model="unused.pt",
        ensemble=ensemble,
        barostat=barostat or "isotropic",
        temperature=80.0,
        pressure=0.1,
        timestep=5.0,
        tchain=TCHAIN,
        pchain=PCHAIN,
    ).resolved()
    return Ensemble.build(atoms, config, thermostat_rng(3))


def _get(obj, path: str):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def test_the_list_here_is_the_list_restarts_use():
    assert {k: tuple(v) for k, v in EXPECTED.items()} == STATE_ATTRIBUTES


@pytest.mark.parametrize("key,attr", CASES)
def test_ase_integrator_has_the_attribute(key, attr):
    dyn = _ensemble(key).dyn
    owner_path, _, name = attr.rpartition(".")
    owner = _get(dyn, owner_path) if owner_path else dyn
    assert name in vars(owner), f"ASE {ase.__version__}: {type(owner).__name__} has no {name}"
    value = np.asarray(_get(dyn, attr))
    assert value.shape == EXPECTED[key][attr] and value.dtype.kind == "f"


@pytest.mark.parametrize("key,attr", CASES)
def test_the_attribute_is_live_state(key, attr):
    """Changing it changes what the integrator does next (dynamics or conserved energy), so it
    is state ASE reads, not a stale copy."""

    def next_step(perturb: bool):
        ens = _ensemble(key)
        for _ in range(2):
            ens.step()
        if perturb:
            state = ens.get_state()
            state[attr] = state[attr] * (1.0 + 1e-3) + 1e-3
            ens.set_state(state)
        ens.step()
        atoms = ens.dyn.atoms
        return np.concatenate(
            [
                atoms.get_positions().ravel(),
                atoms.get_momenta().ravel(),
                atoms.get_cell().ravel(),
                [ens.conserved_energy()],
            ]
        )

    assert not np.array_equal(next_step(False), next_step(True))


def test_serial_world_switch_of_the_lammps_engine():
    """serial_ase replaces ``ase.parallel.world.comm`` (set lazily by ``ase.parallel.MPI``)."""
    from mdband.md.lammps_ranks import serial_ase

    world = ase.parallel.world
    assert isinstance(world, ase.parallel.MPI) and "comm" in vars(world)
    before = vars(world)["comm"]
    inside = serial_ase(lambda: (world.rank, world.size, type(vars(world)["comm"])))
    assert inside == (0, 1, ase.parallel.DummyMPI)
    assert vars(world)["comm"] is before


def test_pyproject_bounds_ase_to_the_version_tested_here():
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"ase\b", d)]
    upper = re.search(r"<\s*([\d.]+)", spec)
    assert upper, f"{spec!r} has no upper bound: a new ASE could break exact restarts silently"
    lower = re.search(r">=\s*([\d.]+)", spec)

    def version(text):
        return tuple(int(x) for x in re.findall(r"\d+", text)[:2])

    assert version(lower.group(1)) <= version(ase.__version__) < version(upper.group(1))
