"""A charge/spin model (deepmd-kit's ``add_chg_spin_ebd``) through ``pair_style mdband ...
charge Q spin S`` (and deepmd-kit's ``charge_spin Q S``) on 1 and 2 ranks: energy, forces,
per-atom energies and virial equal ``Potential.evaluate`` with the same charge and spin
(float64; periodic cubic and triclinic frames); no keywords take the model's default; a model
without one stops LAMMPS with one error line naming what is missing; ``mdband run --engine
lammps --charge --spin`` passes them on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import ase.io
import numpy as np
import pytest
from lammps_harness import (
    BIN,
    DEVICE,
    NKTV2P_METAL,
    read_dump,
    requires_lammps,
    results,
    run_lmp,
)

from mdband import load_model
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader

pytestmark = requires_lammps
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
TYPES = ("H", "C", "O")
MASSES = (1.008, 12.011, 15.999)
# name -> (checkpoint, frame, pair_style keywords, the (charge, spin) they mean)
CASES = {
    "tric": ("chgspin", 1, "charge -1 spin 2", (-1, 2)),
    "cube": ("chgspin", 0, "charge_spin 2 1", (2, 1)),
    "dflt": ("chgspin_default", 0, "", (-1, 2)),
}


def _f(x) -> str:
    return repr(float(x))


def write_data(path: Path, atoms) -> Path:
    c = atoms.cell.array
    assert abs(c[0, 1]) + abs(c[0, 2]) + abs(c[1, 2]) == 0  # LAMMPS' restricted triclinic
    lines = ["charge/spin frame", "", f"{len(atoms)} atoms", "3 atom types", "",
             f"0.0 {_f(c[0, 0])} xlo xhi", f"0.0 {_f(c[1, 1])} ylo yhi",
             f"0.0 {_f(c[2, 2])} zlo zhi", f"{_f(c[1, 0])} {_f(c[2, 0])} {_f(c[2, 1])} xy xz yz",
             "", "Masses", ""]  # fmt: skip
    lines += [f"{t + 1} {m}" for t, m in enumerate(MASSES)] + ["", "Atoms # atomic", ""]
    for i, (s, p) in enumerate(zip(atoms.get_chemical_symbols(), atoms.positions)):
        lines.append(f"{i + 1} {TYPES.index(s) + 1} {_f(p[0])} {_f(p[1])} {_f(p[2])}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _case(name, data, model, keywords):
    vir = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
    return f"""
clear
units metal
atom_style atomic
read_data {data}
pair_style mdband {model} dtype float64 device {DEVICE} {keywords}
pair_coeff * * {" ".join(TYPES)}
compute pe all pe/atom
compute vir all pressure NULL virial
thermo_style custom step pe
dump d all custom 1 {name}.dump id fx fy fz c_pe
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} $(pe:%.17g) {vir} $(vol:%.17g)"
undump d
"""


@pytest.mark.parametrize("nprocs", [1, 2])
def test_pair_style_charge_spin_parity(tmp_path, nprocs):
    frames = ase.io.read(FIX / "structures.extxyz", index=":")
    script = ""
    for name, (model, i, keywords, _) in CASES.items():
        data = write_data(tmp_path / f"{name}.data", frames[i])
        script += _case(name, data, FIX / f"{model}.pt", keywords)
    proc = run_lmp(script, tmp_path, nprocs=nprocs, timeout=600)
    got = results(proc.stdout)
    assert "mdband: total charge -1, spin multiplicity 2" in proc.stdout
    pot = load_model(FIX / "chgspin.pt", dtype="float64", device="cpu")
    for name, (_, i, _, (charge, spin)) in CASES.items():
        atoms = frames[i]
        ref = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols(),
                           charge=charge, spin=spin)  # fmt: skip
        pe, *wp, vol = got[name]
        assert pe == pytest.approx(ref.energy, rel=1e-10), (nprocs, name)
        w_ref = ref.virial[[0, 1, 2, 0, 0, 1], [0, 1, 2, 1, 2, 2]]
        np.testing.assert_allclose(np.array(wp) * vol / NKTV2P_METAL, w_ref, rtol=0, atol=1e-8)
        dump = read_dump(tmp_path / f"{name}.dump")
        f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
        np.testing.assert_allclose(f, ref.forces, rtol=0, atol=1e-8, err_msg=f"{nprocs} {name}")
        np.testing.assert_allclose(dump["c_pe"], ref.atom_energy, rtol=0, atol=1e-10)


@pytest.mark.parametrize("keywords,nprocs,expected", [
    ("", 2, "needs the system's total charge (charge) and spin multiplicity (spin)"),
    ("charge 0.5 spin 1", 1, "charge must be a whole number"),
])  # fmt: skip
def test_pair_style_charge_spin_errors(tmp_path, keywords, nprocs, expected):
    atoms = ase.io.read(FIX / "structures.extxyz", 0)
    data = write_data(tmp_path / "e.data", atoms)
    proc = run_lmp(_case("e", data, FIX / "chgspin.pt", keywords), tmp_path, nprocs=nprocs,
                   timeout=300, check=False)  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-2000:]
    errors = [line for line in text.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1 and expected in errors[0], text[-2000:]
    assert "Traceback" not in text


def test_run_engine_lammps_passes_charge_spin(tmp_path):
    """``mdband run --engine lammps --charge -1 --spin 2``: every frame's forces and energy are
    the single call's; the checkpoint keeps the values."""
    ase.io.write(tmp_path / "cube.extxyz", ase.io.read(FIX / "structures.extxyz", 0))
    cmd = [str(BIN / "mdband"), "run", "--engine", "lammps", "--structure", "cube.extxyz",
           "--model", str(FIX / "chgspin.pt"), "--charge", "-1", "--spin", "2", "--steps", "2",
           "--ensemble", "nve", "--temperature", "50", "--timestep", "0.5", "--traj-every", "1",
           "--trajectory", "t.h5", "--checkpoint", "c.ckpt", "--dtype", "float64",
           "--traj-precision", "float64", "--traj-force-unit", "eV Angstrom-1", "--device",
           "cpu", "--no-progress"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MDBAND_NUM_THREADS": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert read_checkpoint(tmp_path / "c.ckpt").config["charge"] == -1
    pot = load_model(FIX / "chgspin.pt", dtype="float64", device="cpu")
    with H5MDReader(tmp_path / "t.h5") as r:
        assert list(r.steps) == [0, 1, 2]
        for a, e in zip(r.to_atoms(slice(None)), r.observable("potential_energy")):
            ref = pot.evaluate(a.positions, a.cell.array, True, a.get_chemical_symbols(),
                               charge=-1, spin=2)  # fmt: skip
            np.testing.assert_allclose(a.get_forces(), ref.forces, rtol=0, atol=1e-8)
            assert e == pytest.approx(ref.energy, rel=1e-10)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_bridged_charge_spin_model_and_atom_virials(tmp_path, nprocs):
    """A ZBL-bridged charge/spin model (chgspin_zbl, make_chgspin_combo_fixtures.py) on the
    compact cube (a 0.42 Å O-H pair across x = 3 Å, the two-rank cut): energy, forces and
    per-atom virials (``compute stress/atom``) are deepmd-kit's for ``charge 2 spin 3``."""
    ref = np.load(FIX / "chgspin_zbl.npz")
    k = [tuple(c) for c in ref["cases"]].index((2.0, 3.0))
    tm = [str(t) for t in ref["type_map"]]
    from ase import Atoms

    atoms = Atoms([tm[t] for t in ref["atype_0"]], positions=ref["coord_0"], cell=ref["cell_0"],
                  pbc=True)  # fmt: skip
    data = write_data(tmp_path / "z.data", atoms)
    procs = "2 1 1" if nprocs == 2 else "1 1 1"
    sa = " ".join(f"c_sa[{c}]" for c in range(1, 7))
    script = _case("z", data, FIX / "chgspin_zbl.pt", "charge 2 spin 3")
    script = script.replace("read_data", f"processors {procs}\nread_data")
    script = script.replace("compute pe all pe/atom", "compute pe all pe/atom\n"
                            "compute sa all stress/atom NULL virial")  # fmt: skip
    script = script.replace("fx fy fz c_pe", f"fx fy fz c_pe {sa}")
    proc = run_lmp(script, tmp_path, nprocs=nprocs, timeout=600)
    pe, *_ = results(proc.stdout)["z"]
    assert pe == pytest.approx(float(ref[f"energy_{k}_0"]), rel=1e-10)
    dump = read_dump(tmp_path / "z.dump")
    f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
    np.testing.assert_allclose(f, ref[f"forces_{k}_0"], rtol=0, atol=1e-8)
    assert np.abs(f).max() > 100.0  # the close pairs' ZBL forces
    av = ref[f"atom_virial_{k}_0"].reshape(-1, 3, 3)
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    want = np.stack([av[:, b, a] for a, b in voigt], axis=1)  # LAMMPS' −r ⊗ g order
    got = -np.stack([dump[f"c_sa[{c}]"] for c in range(1, 7)], axis=1) / NKTV2P_METAL
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)
