"""Ensembles: thin wrappers over ASE's integrators that can save and restore their state.

Each ensemble names the integrator internals that evolve during a run (thermostat chains,
barostat variables, the cell reference of the isotropic barostat, Bussi's energy account).
Together with positions, momenta, cell and the state of the random generator this object
owns, they are everything a resumed run needs to continue bit for bit.

ASE (3.29) offers no public way to read or set them: :data:`STATE_ATTRIBUTES` are private
attributes of its classes, so ``pyproject.toml`` bounds ``ase`` above and
``tests/md/test_ase_internals.py`` names each of them and fails on an ASE that lacks one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from ase import Atoms, units
from ase.md.bussi import Bussi
from ase.md.langevin import Langevin
from ase.md.nose_hoover_chain import MTKNPT, IsotropicMTKNPT, NoseHooverChainNVT
from ase.md.verlet import VelocityVerlet

from mdband.io.checkpoint import CheckpointError
from mdband.md.config import RunConfig
from mdband.md.errors import ConfigError

_NHC = ("_thermostat._eta", "_thermostat._p_eta")
_BARO = ("_barostat._xi", "_barostat._p_xi")
STATE_ATTRIBUTES = {
    "nve": (),
    "nvt-langevin": (),
    "nvt-bussi": ("transferred_energy",),
    "nvt-nhc": _NHC,
    "npt-mtk/isotropic": (*_NHC, *_BARO, "_eps", "_p_eps", "_cell0", "_volume0"),
    "npt-mtk/full": (*_NHC, *_BARO, "_p_g", "_h"),
}
#: the ASE integrators of the ensembles (Bussi is a VelocityVerlet)
Integrator = VelocityVerlet | Langevin | NoseHooverChainNVT | IsotropicMTKNPT | MTKNPT


def _key(config: RunConfig) -> str:
    return f"npt-mtk/{config.barostat}" if config.ensemble == "npt-mtk" else config.ensemble


def _ase_integrator(atoms: Atoms, c: RunConfig, rng: np.random.Generator) -> Integrator:
    dt = c.timestep * units.fs
    assert c.tdamp is not None and c.pdamp is not None  # a resolved config (RunConfig.resolved)
    tdamp = c.tdamp * units.fs
    pdamp = c.pdamp * units.fs
    if c.ensemble == "nve":
        return VelocityVerlet(atoms, timestep=dt)
    if c.ensemble == "nvt-langevin":
        friction = c.friction / (1000.0 * units.fs)
        return Langevin(
            atoms,
            timestep=dt,
            temperature_K=c.temperature,
            friction=friction,
            fixcm=False,
            rng=rng,
        )
    if c.ensemble == "nvt-bussi":
        if atoms.get_kinetic_energy() <= 0:
            raise ConfigError("nvt-bussi needs non-zero initial velocities")
        return Bussi(atoms, timestep=dt, temperature_K=c.temperature, taut=tdamp, rng=rng)
    if c.ensemble == "nvt-nhc":
        return NoseHooverChainNVT(
            atoms,
            timestep=dt,
            temperature_K=c.temperature,
            tdamp=tdamp,
            tchain=c.tchain,
            tloop=c.tloop,
        )
    if not np.all(atoms.get_pbc()):
        raise ConfigError("npt-mtk needs a structure periodic in all three directions")
    cls = IsotropicMTKNPT if c.barostat == "isotropic" else MTKNPT
    return cls(
        atoms,
        timestep=dt,
        temperature_K=c.temperature,
        pressure_au=c.pressure * units.GPa,
        tdamp=tdamp,
        pdamp=pdamp,
        tchain=c.tchain,
        pchain=c.pchain,
        tloop=c.tloop,
        ploop=c.ploop,
    )


@dataclass
class Ensemble:
    """An ASE integrator plus the random generator it draws from (if any)."""

    name: str
    dyn: Integrator
    rng: np.random.Generator | None
    attributes: tuple[str, ...]

    @classmethod
    def build(cls, atoms: Atoms, config: RunConfig, rng: np.random.Generator) -> Ensemble:
        """Integrator for ``config.ensemble`` acting on ``atoms`` (with a calculator set)."""
        stochastic = config.ensemble in ("nvt-langevin", "nvt-bussi")
        dyn = _ase_integrator(atoms, config, rng)
        attributes = STATE_ATTRIBUTES[_key(config)]
        for name in attributes:  # fail now, not at the first checkpoint, if ASE changed
            _get(dyn, name)
        return cls(_key(config), dyn, rng if stochastic else None, attributes)

    def step(self) -> None:
        """Advance the dynamics by one time step."""
        self.dyn.step()

    def conserved_energy(self) -> float:
        """Return the quantity the integrator conserves (eV); NaN for Langevin."""
        atoms = self.dyn.atoms
        if self.name == "nvt-langevin":
            return math.nan
        if self.name == "nve":
            return float(atoms.get_potential_energy() + atoms.get_kinetic_energy())
        if self.name == "nvt-bussi":
            etot = atoms.get_potential_energy() + atoms.get_kinetic_energy()
            assert isinstance(self.dyn, Bussi)
            return float(etot - self.dyn.transferred_energy)
        assert isinstance(self.dyn, (NoseHooverChainNVT, IsotropicMTKNPT, MTKNPT))  # the NHC ones
        return float(self.dyn.get_conserved_energy())

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict[str, np.ndarray]:
        """Return copies of the integrator internals (float64 arrays, keyed by attribute path)."""
        return {name: np.array(_get(self.dyn, name), dtype=np.float64) for name in self.attributes}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore the integrator internals from :meth:`get_state`'s dict (shapes checked)."""
        missing = sorted(set(self.attributes) - set(state))
        if missing:
            raise CheckpointError(f"checkpoint lacks {self.name} state: {', '.join(missing)}")
        for name in self.attributes:
            current = _get(self.dyn, name)
            value = np.asarray(state[name], dtype=np.float64)
            if np.shape(current) != value.shape:
                raise CheckpointError(
                    f"checkpoint {self.name} state {name} has shape {value.shape}, "
                    f"expected {np.shape(current)}"
                )
            _set(self.dyn, name, value.copy() if value.ndim else float(value))

    def rng_state(self) -> dict:
        """Return the thermostat generator's state (empty for a deterministic ensemble)."""
        return {} if self.rng is None else {"thermostat": self.rng.bit_generator.state}

    def set_rng_state(self, states: dict) -> None:
        """Restore the thermostat generator's state from :meth:`rng_state`'s dict."""
        if self.rng is None:
            return
        if "thermostat" not in states:
            raise CheckpointError(f"checkpoint lacks the random state of {self.name}")
        try:
            self.rng.bit_generator.state = states["thermostat"]
        except (TypeError, ValueError, KeyError) as exc:
            raise CheckpointError(f"checkpoint random state is invalid ({exc})") from None


def _get(obj, path: str):
    for part in path.split("."):
        if not hasattr(obj, part):
            raise RuntimeError(f"ASE integrator has no attribute {path!r}; unsupported ASE version")
        obj = getattr(obj, part)
    return obj


def _set(obj, path: str, value) -> None:
    *head, last = path.split(".")
    for part in head:
        obj = getattr(obj, part)
    setattr(obj, last, value)


def thermostat_rng(seed: int | None) -> np.random.Generator:
    """Return the generator of thermostat noise (independent of the initial-velocity stream)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(2)[1]))


def velocity_rng(seed: int | None) -> np.random.Generator:
    """Return the generator of the initial Maxwell-Boltzmann velocities."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed).spawn(2)[0]))
