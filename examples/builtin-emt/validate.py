"""Measure the numbers of the ``emt-cuni`` model card.

1. Errors against EMT on independent frames (``emt-cuni-test.extxyz`` from make_data.py:
   256-atom Cu, Cu50Ni50 and Ni cells from EMT MD at 300 K and 900 K).
2. Lattice constants of Cu and Ni (energy minimum of the fcc cell), unrelaxed vacancy
   formation and (111) surface energies, model vs EMT.
3. Stability: 10 ps of Langevin NVT at 300 K on a 256-atom Cu50Ni50 cell (ASE's integrator,
   ``mdband.Calculator``, friction 1/(100 fs)): the closest pair distance over the run and the
   mean temperature after 2 ps of equilibration.
4. Energy conservation: NVE (velocity Verlet) from the end of the NVT run; the drift is the
   least-squares slope of the total energy per atom against time.
5. Speed: ``Potential.evaluate`` (float32) on a 2048-atom Cu50Ni50 cell, 1 and 2 threads.

Usage::

    python validate.py                               # the shipped builtin:emt-cuni
    python validate.py --model emt-cuni.mdband --nvt-ps 2 --nve-ps 1   # a quick check
Writes ``validation.json`` next to the script's working directory and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from ase import units
from ase.build import bulk
from ase.calculators.emt import EMT
from ase.md import velocitydistribution as _vd
from ase.md.langevin import Langevin
from ase.md.verlet import VelocityVerlet

import mdband
from mdband.fit.data import read_frames

LATTICE = {"Cu": 3.593, "Ni": 3.492}  # EMT (asap_cutoff) lattice constants, Å
# ASE >= 3.29 renamed MaxwellBoltzmannDistribution to thermalize_momenta
thermalize = getattr(_vd, "thermalize_momenta", None) or _vd.MaxwellBoltzmannDistribution


def alloy(n_rep: int, x_ni: float, seed: int):
    a0 = (1 - x_ni) * LATTICE["Cu"] + x_ni * LATTICE["Ni"]
    atoms = bulk("Cu", "fcc", a=a0, cubic=True).repeat((n_rep,) * 3)
    rng = np.random.default_rng(seed)
    sym = np.array(["Cu"] * len(atoms))
    sym[rng.choice(len(atoms), int(round(x_ni * len(atoms))), replace=False)] = "Ni"
    atoms.set_chemical_symbols(sym.tolist())
    return atoms


def test_errors(pot, path) -> dict:
    frames = read_frames(path)
    de, df = [], []
    for f in frames:
        r = pot.evaluate(f.positions, f.cell, f.pbc, f.species)
        de.append((r.energy - f.energy) / f.n_atoms)
        df.append((r.forces - f.forces).reshape(-1))
    de, df = np.array(de), np.concatenate(df)
    ref_f = np.concatenate([f.forces.reshape(-1) for f in frames])
    return {
        "frames": len(frames),
        "atoms": int(sum(f.n_atoms for f in frames)),
        "energy_rmse_meV_atom": 1e3 * float(np.sqrt(np.mean(de**2))),
        "energy_mae_meV_atom": 1e3 * float(np.mean(np.abs(de))),
        "force_rmse_meV_A": 1e3 * float(np.sqrt(np.mean(df**2))),
        "force_mae_meV_A": 1e3 * float(np.mean(np.abs(df))),
        "force_rms_of_reference_meV_A": 1e3 * float(np.sqrt(np.mean(ref_f**2))),
    }


def _model_energy(pot, atoms) -> float:
    return pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers).energy


def _emt_energy(atoms) -> float:
    atoms.calc = EMT(asap_cutoff=True)
    return atoms.get_potential_energy()


def lattice_constants(pot) -> dict:
    """Minimum of a quartic fit to E(a) of the 4-atom fcc cell, model and EMT."""
    out = {}
    for el in ("Cu", "Ni"):
        grid = np.linspace(0.96, 1.04, 17) * LATTICE[el]
        res = {}
        for name, energy in (("model", lambda a: _model_energy(pot, a)), ("emt", _emt_energy)):
            e = [energy(bulk(el, "fcc", a=x, cubic=True)) / 4 for x in grid]
            c = np.polyfit(grid, e, 4)
            fine = np.linspace(grid[0], grid[-1], 2001)
            res[name] = float(fine[np.argmin(np.polyval(c, fine))])
        out[el] = res
    return out


def defects(pot) -> dict:
    """Unrelaxed vacancy formation energy (108-atom cell) and (111) surface energy, eV."""
    from ase.build import fcc111

    out = {}
    for el in ("Cu", "Ni"):
        a0 = LATTICE[el]
        bulk_cell = bulk(el, "fcc", a=a0, cubic=True).repeat(3)
        vac = bulk_cell.copy()
        del vac[0]
        slab = fcc111(el, (1, 1, 6), a=a0, vacuum=8.0, periodic=True)
        ref = bulk(el, "fcc", a=a0)
        res = {}
        for name, energy in (("model", lambda a: _model_energy(pot, a)), ("emt", _emt_energy)):
            e_atom = energy(ref.copy())
            e_vac = energy(vac.copy()) - (len(bulk_cell) - 1) * e_atom
            area = np.linalg.norm(np.cross(slab.cell[0], slab.cell[1]))
            e_surf = (energy(slab.copy()) - len(slab) * e_atom) / (2 * area)
            res[name] = {"vacancy_eV": float(e_vac), "surface111_eV_A2": float(e_surf)}
        out[el] = res
    return out


def nvt_nve(pot, nvt_ps: float, nve_ps: float, dt_fs: float, seed: int) -> dict:
    atoms = alloy(4, 0.5, seed)
    atoms.calc = mdband.Calculator(pot, skin=0.0)
    n = len(atoms)
    rng = np.random.default_rng(seed)
    temp = 300.0
    thermalize(atoms, temperature_K=temp, rng=rng)
    dyn = Langevin(
        atoms,
        dt_fs * units.fs,
        temperature_K=temp,
        friction=0.01 / units.fs,
        fixcm=False,
        rng=rng,
    )
    steps = int(round(nvt_ps * 1000 / dt_fs))
    every = 10
    temps, dmin = [], np.inf
    t0 = time.perf_counter()
    for _ in range(steps // every):
        dyn.run(every)
        temps.append(atoms.get_temperature())
        d = atoms.get_all_distances(mic=True)
        dmin = min(dmin, float(d[np.triu_indices(n, 1)].min()))
    nvt_time = time.perf_counter() - t0
    t_axis = (np.arange(len(temps)) + 1) * every * dt_fs / 1000
    after = np.array(temps)[t_axis > min(2.0, 0.2 * nvt_ps)]
    nvt = {
        "atoms": n,
        "ps": nvt_ps,
        "timestep_fs": dt_fs,
        "min_distance_A": dmin,
        "mean_temperature_K": float(after.mean()),
        "temperature_error_percent": float(100 * abs(after.mean() - temp) / temp),
        "seconds": nvt_time,
    }
    # NVE from the thermalised state
    nve_dt = 0.5 * dt_fs
    dyn = VelocityVerlet(atoms, nve_dt * units.fs)
    steps = int(round(nve_ps * 1000 / nve_dt))
    times, etot = [], []
    for k in range(steps // every):
        dyn.run(every)
        times.append((k + 1) * every * nve_dt / 1000)
        etot.append((atoms.get_potential_energy() + atoms.get_kinetic_energy()) / n)
    slope = float(np.polyfit(times, etot, 1)[0])
    nve = {
        "atoms": n,
        "ps": nve_ps,
        "timestep_fs": nve_dt,
        "drift_eV_atom_ps": slope,
        "total_energy_std_eV_atom": float(np.std(etot)),
        "mean_temperature_K": float(atoms.get_temperature()),
    }
    return {"nvt": nvt, "nve": nve}


def speed(model_path: str) -> dict:
    atoms = alloy(8, 0.5, 0)
    atoms.rattle(0.05, seed=1)
    out = {"atoms": len(atoms)}
    pot = mdband.load_model(model_path, dtype="float32")
    old = torch.get_num_threads()
    for threads in (1, 2):
        torch.set_num_threads(threads)
        args = (atoms.positions, atoms.cell.array, True, atoms.numbers)
        pot.evaluate(*args)
        best = np.inf
        for _ in range(5):
            t = time.perf_counter()
            pot.evaluate(*args)
            best = min(best, time.perf_counter() - t)
        out[f"ms_per_step_{threads}_threads"] = 1e3 * best
    torch.set_num_threads(old)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="builtin:emt-cuni")
    ap.add_argument("--test-data", default="emt-cuni-test.extxyz")
    ap.add_argument("--nvt-ps", type=float, default=10.0)
    ap.add_argument("--nve-ps", type=float, default=5.0)
    ap.add_argument("--timestep", type=float, default=4.0, help="NVT time step in fs")
    ap.add_argument("--dtype", default="float64", help="precision of the MD runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--output", default="validation.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pot = mdband.load_model(args.model, dtype=args.dtype)
    report = {"model": args.model, "model_hash": pot.model_hash, "dtype": args.dtype}
    if Path(args.test_data).exists():
        report["test_set"] = test_errors(pot, args.test_data)
        print("test set:", json.dumps(report["test_set"]), flush=True)
    else:
        print(f"{args.test_data} not found (run make_data.py); skipping the test-set errors")
    report["lattice_constant_A"] = lattice_constants(pot)
    print("lattice constants:", json.dumps(report["lattice_constant_A"]), flush=True)
    report["defects"] = defects(pot)
    print("defects (unrelaxed):", json.dumps(report["defects"]), flush=True)
    report.update(nvt_nve(pot, args.nvt_ps, args.nve_ps, args.timestep, args.seed))
    print("NVT:", json.dumps(report["nvt"]), flush=True)
    print("NVE:", json.dumps(report["nve"]), flush=True)
    report["speed"] = speed(args.model)
    print("speed:", json.dumps(report["speed"]), flush=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
