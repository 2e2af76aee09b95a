"""Inputs written for ``pair_style deepmd`` run with only the pair lines changed.

* deepmd-kit's water example (``examples/water/lmp``: its ``water.lmp`` is
  ``../shared/data/dpa4-water-smoke/water.lmp``; the input's commands are repeated here) with
  ``pair_style mdband pretrained.pt``, in metal and real units, on 1 and 2 ranks;
* per-atom virials (``compute centroid/stress/atom``, ``compute stress/atom``) equal to
  deepmd-kit's ``DeepPot.eval(..., atomic=True)`` (the fixtures) to 1e-10 eV in float64, in
  metal and real units, on 1 and 2 ranks; the nine centroid columns sum to the virial;
* every unit style deepmd-kit accepts, converted with deepmd-kit's factors;
* ``pair_coeff * *`` without element names (the model's type map in order).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lammps_harness import DEVICE, make_frame, read_dump, requires_lammps, run_lmp

from mdband import load_model
from mdband.atom_virial import LAMMPS_CENTROID

pytestmark = requires_lammps

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures" / "deepmd"
SHARED = REPO.parent / "shared" / "data" / "dpa4-water-smoke"
needs_water = pytest.mark.skipif(
    not (SHARED / "pretrained.pt").is_file(), reason="../shared water model and data absent"
)
# LAMMPS' constants (src/update.cpp): Boltzmann constant and pressure*volume -> energy factor
BOLTZ = {"metal": 8.617343e-5, "real": 0.0019872067}
NKTV2P = {"metal": 1.6021765e6, "real": 68568.415}
ATM_PER_BAR = 1.0 / 1.01325  # LAMMPS' real pressures are in atm, metal's in bar


def _water_input(units: str, model: str, coeff: str, dump_every: int, steps: int) -> str:
    """deepmd-kit's examples/water/lmp/in.lammps, pair lines changed, shorter."""
    return f"""
clear
units           {units}
boundary        p p p
atom_style      atomic
neighbor        2.0 bin
neigh_modify    every 10 delay 0 check no
read_data       {SHARED / "water.lmp"}
mass            1 16
mass            2 2
pair_style      mdband {model} dtype float64 device {DEVICE}
pair_coeff      {coeff}
velocity        all create 330.0 23456789
fix             1 all nvt temp 330.0 330.0 0.5
timestep        0.0005
thermo_style    custom step pe ke etotal temp press vol
thermo          1
thermo_modify   format float %.15g
dump            1 all custom {dump_every} water-{units}.dump id type x y z
run             {steps}
"""


def _thermo(stdout: str) -> list[np.ndarray]:
    """Every thermo table of a log (rows of step pe ke etotal temp press vol)."""
    tables, rows = [], None
    for line in stdout.splitlines():
        words = line.split()
        if words[:2] == ["Step", "PotEng"]:
            rows = []
            tables.append(rows)
            continue
        if rows is not None:
            try:
                rows.append([float(w) for w in words])
            except ValueError:
                rows = None
            else:
                if len(words) != 7:
                    rows.pop()
                    rows = None
    return [np.array(t) for t in tables]


@needs_water
@pytest.mark.parametrize("nprocs", [1, 2])
def test_deepmd_water_example_metal_and_real(nprocs, tmp_path):
    model = SHARED / "pretrained.pt"
    script = _water_input("metal", model, "* * O H", 2, 4)
    script += _water_input("real", model, "* *", 2, 4)
    proc = run_lmp(script, tmp_path, nprocs=nprocs)
    metal, real = _thermo(proc.stdout)
    assert metal.shape == real.shape == (5, 7)
    assert "LAMMPS types 1..2 are O H (the model's order)" in proc.stdout
    energy = BOLTZ["real"] / BOLTZ["metal"]  # kcal/mol per eV, as deepmd-kit converts
    assert real[0, 1] == pytest.approx(metal[0, 1] * energy, rel=1e-12)
    assert real[0, 5] == pytest.approx(metal[0, 5] * ATM_PER_BAR, rel=1e-6)
    assert real[0, 6] == metal[0, 6]
    # the potential energy is the model's
    pot = load_model(model, dtype="float64")
    start = read_dump(tmp_path / "water-metal.dump")  # last frame: step 4
    assert len(start["id"]) == 192
    for units in ("metal", "real"):
        steps = [int(line) for line in _dump_steps(tmp_path / f"water-{units}.dump")]
        assert steps == [0, 2, 4], units
    lines = (SHARED / "water.lmp").read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("Atoms"))
    atoms = np.array([[float(v) for v in line.split()] for line in lines[k + 2 : k + 194]])
    cell = np.diag([12.4447] * 3)
    res = pot.evaluate(atoms[:, 2:5], cell, True, [["O", "H"][int(t) - 1] for t in atoms[:, 1]])
    assert metal[0, 1] == pytest.approx(res.energy, rel=1e-12)
    if nprocs == 1:
        np.save(tmp_path.parent / "water-thermo.npy", np.stack([metal, real]))
    else:
        ref = tmp_path.parent / "water-thermo.npy"
        if ref.exists():  # the same dynamics on 2 ranks
            np.testing.assert_allclose(np.stack([metal, real]), np.load(ref), rtol=1e-9)


def _dump_steps(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return [lines[i + 1] for i, line in enumerate(lines) if line == "ITEM: TIMESTEP"]


def _data_file(path: Path, positions, cell, types, ntypes: int, masses) -> Path:
    """An orthogonal-box data file with positions folded into the box."""
    lengths = np.diag(cell)
    assert np.allclose(cell, np.diag(lengths))
    pos = np.mod(positions, lengths)
    lines = ["per-atom virial test frame", "", f"{len(pos)} atoms", f"{ntypes} atom types", ""]
    lines += [f"0.0 {float(lengths[k])!r} {a}lo {a}hi" for k, a in enumerate("xyz")]
    lines += ["", "Masses", ""] + [f"{t + 1} {m}" for t, m in enumerate(masses)]
    lines += ["", "Atoms # atomic", ""]
    lines += [
        f"{i + 1} {t + 1} {p[0]:.17g} {p[1]:.17g} {p[2]:.17g}"
        for i, (t, p) in enumerate(zip(types, pos))
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _virial_input(name, units, data, model, ntypes) -> str:
    vir = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
    cs = " ".join(f"c_cs[{k}]" for k in range(1, 10))
    sa = " ".join(f"c_sa[{k}]" for k in range(1, 7))
    return f"""
clear
units {units}
atom_style atomic
boundary p p p
read_data {data}
pair_style mdband {model} dtype float64 device {DEVICE}
pair_coeff * *
neighbor 1.0 bin
compute cs all centroid/stress/atom NULL virial
compute sa all stress/atom NULL virial
compute vir all pressure NULL virial
thermo_style custom step pe c_vir[1]
dump d all custom 1 {name}.dump id {cs} {sa}
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} {vir} $(vol:%.17g)"
undump d
"""


def _virial_cases(tmp_path: Path) -> list[tuple[str, str, str, np.ndarray, Path]]:
    """(name, model, units, deepmd-kit's atom_virial (N, 9), data file) of each case."""
    cases = []
    ref = np.load(FIX / "s2ffn.npz")
    data = _data_file(tmp_path / "s2ffn.data", ref["coord_0"], ref["cell_0"], ref["atype_0"],
                      3, [1.008, 12.011, 15.999])  # fmt: skip
    for units in ("metal", "real"):
        cases.append((f"s2ffn-{units}", str(FIX / "s2ffn.pt"), units, ref["atom_virial_0"], data))
    if (SHARED / "pretrained.pt").is_file():
        w = np.load(FIX / "water_fp64.npz")
        data = _data_file(tmp_path / "water.data", w["coord_0"], w["cell_0"], w["atype_0"], 2,
                          [15.999, 1.008])  # fmt: skip
        model = str(SHARED / "pretrained.pt")
        cases.append(("water-metal", model, "metal", w["atom_virial_0"], data))
    return cases


@pytest.mark.parametrize("nprocs", [1, 2])
def test_per_atom_virials_are_deepmds(nprocs, tmp_path):
    """``centroid/stress/atom`` is −(deepmd-kit's atom_virial) · nktv2p in LAMMPS' column
    order (xy = Σ r_x f_y), ``stress/atom`` its first six columns; both sum to the virial."""
    from lammps_harness import results

    cases = _virial_cases(tmp_path)
    script = "".join(_virial_input(n, u, d, m, 0) for n, m, u, _, d in cases)
    got = results(run_lmp(script, tmp_path, nprocs=nprocs).stdout)
    for name, _, units, want, _ in cases:
        dump = read_dump(tmp_path / f"{name}.dump")
        to_ev = 1.0 / (NKTV2P[units] * BOLTZ[units] / BOLTZ["metal"])
        cs = -np.stack([dump[f"c_cs[{k}]"] for k in range(1, 10)], axis=1) * to_ev
        sa = -np.stack([dump[f"c_sa[{k}]"] for k in range(1, 7)], axis=1) * to_ev
        expected = want[:, list(LAMMPS_CENTROID)]
        assert np.abs(expected).max() > 1e-4, name
        np.testing.assert_allclose(cs, expected, rtol=0, atol=1e-10, err_msg=name)
        np.testing.assert_allclose(sa, expected[:, :6], rtol=0, atol=1e-10, err_msg=name)
        *w6, vol = got[name]
        virial = -np.array(w6) * vol * to_ev  # compute pressure NULL virial: -W / V
        sums = cs.sum(0)
        np.testing.assert_allclose(-sums[:6], virial, rtol=0, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(sums[6:], sums[3:6], rtol=0, atol=1e-9, err_msg=name)


UNITS_DRIVER = """
import json, sys
import numpy as np
from lammps import lammps
model, styles = sys.argv[1], json.loads(sys.argv[2])
thermo = "step pe " + " ".join(f"c_vir[{k}]" for k in range(1, 7)) + " vol"
out = {}
for units in styles:
    lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
    for line in (
        f"units {units}", "atom_style atomic", f"read_data {units}.data",
        f"neighbor {styles[units]!r} bin",  # 1 A: the defaults of si and cgs are meters
        f"pair_style mdband {model} dtype float64 device cpu", "pair_coeff * *",
        "compute vir all pressure NULL virial", "compute pe all pe/atom",
        f"thermo_style custom {thermo}", "run 0",
    ):
        lmp.command(line)
    f = np.array(lmp.gather_atoms("f", 1, 3)).reshape(-1, 3)
    ids = np.array(lmp.gather_atoms("id", 0, 1))
    last = lmp.last_thermo()  # the thermo row of step 0
    out[units] = dict(
        pe=last["PotEng"],
        pe_atoms=float(np.sum(lmp.numpy.extract_compute("pe", 1, 1))),
        vir=[last[f"c_vir[{k}]"] for k in range(1, 7)],
        vol=last["Volume"],
        f=f[np.argsort(ids)].tolist(),
        boltz=lmp.extract_global("boltz"),
        angstrom=lmp.extract_global("angstrom"),
        nktv2p=lmp.extract_global("nktv2p"),
    )
    lmp.close()
print("JSON", json.dumps(out))
"""
# LAMMPS' distance unit per Angstrom (its `angstrom` constant) of every unit style but lj
ANGSTROM = {"metal": 1.0, "real": 1.0, "si": 1e-10, "cgs": 1e-8, "electron": 1.88972612,
            "micro": 1e-4, "nano": 0.1}  # fmt: skip


def test_every_unit_style_deepmd_accepts(models, tmp_path):
    """Energies x boltz/8.617343e-5, forces x that / angstrom, virials x the energy factor
    (deepmd-kit's conversions), against the same frame in metal units."""
    frame = make_frame(grid=(3, 3, 3), spacing=3.6, seed=5)
    for units, scale in ANGSTROM.items():
        _data_file(tmp_path / f"{units}.data", frame.positions * scale, frame.cell * scale,
                   frame.types - 1, 2, [1.0, 1.0])  # fmt: skip
    cmd = [sys.executable, "-c", UNITS_DRIVER, str(models["mp2"]), json.dumps(ANGSTROM)]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=_env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.split("JSON", 1)[1])
    pot = load_model(models["mp2"], dtype="float64")
    res = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    assert got["metal"]["pe"] == pytest.approx(res.energy, rel=1e-12)
    voigt = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
    for units, r in got.items():
        assert r["angstrom"] == pytest.approx(ANGSTROM[units], rel=1e-12), units
        energy = r["boltz"] / BOLTZ["metal"]
        force = energy / r["angstrom"]
        assert r["pe"] == pytest.approx(res.energy * energy, rel=1e-10), units
        assert r["pe_atoms"] == pytest.approx(r["pe"], rel=1e-10), units
        np.testing.assert_allclose(np.array(r["f"]), res.forces * force, rtol=1e-9,
                                   atol=1e-12 * force, err_msg=units)  # fmt: skip
        w = np.array(r["vir"]) * r["vol"] / r["nktv2p"]  # compute pressure: W / V
        w_ref = np.array([res.virial[a, b] for a, b in voigt]) * energy
        np.testing.assert_allclose(w, w_ref, rtol=1e-8, atol=1e-10 * energy, err_msg=units)


def _env() -> dict:
    import os

    env = dict(os.environ)
    env.setdefault("MDBAND_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _messages(proc) -> list[str]:
    text = proc.stdout + proc.stderr
    return [line for line in text.splitlines() if line.startswith(("ERROR", "WARNING"))]


@pytest.mark.parametrize(
    "units, ntypes, coeff, expected",
    [
        ("lj", 2, "* *", "ERROR: pair_style mdband does not support 'units lj'"),
        ("metal", 3, "* *", "this input has 3 atom types and the model only 2"),
        ("metal", 1, "* *", "WARNING: pair_coeff mdband: pair_coeff * * maps the 1 atom types"),
        ("metal", 2, "1 * Ar Kr", "Pair_coeff must start with * *"),
        ("metal", 2, "* * Ar", "one element per atom type"),
    ],
)
def test_pair_coeff_and_units_errors(units, ntypes, coeff, expected, models, tmp_path):
    script = f"""
units {units}
atom_style atomic
region box block 0 12 0 12 0 12
create_box {ntypes} box
create_atoms 1 single 1 1 1
create_atoms 1 single 4.5 1 1
mass * 1.0
pair_style mdband {models["lj"]} dtype float64 device cpu
pair_coeff {coeff}
run 0
"""
    proc = run_lmp(script, tmp_path, check=False, timeout=180)
    lines = _messages(proc)
    assert lines and expected in lines[0], (proc.stdout + proc.stderr)[-2000:]
    assert (proc.returncode == 0) == expected.startswith("WARNING")


def test_hybrid_overlay_with_zbl(models, tmp_path):
    """``pair_style hybrid/overlay mdband MODEL ... zbl ...``: energies and forces are the sums
    of the two styles run alone (``pair_coeff * * mdband`` with or without element names)."""
    from lammps_harness import ELEMENTS, results, write_data

    data = write_data(tmp_path / "f.data", make_frame(grid=(4, 4, 4), seed=6))
    zbl = "pair_coeff 1 1 zbl 18 18\npair_coeff 1 2 zbl 18 36\npair_coeff 2 2 zbl 36 36"
    cases = {
        "mdband": f"pair_style mdband {models['lj']} dtype float64 device cpu\n"
        f"pair_coeff * * {' '.join(ELEMENTS)}",
        "zbl": "pair_style zbl 4.0 5.0\n" + zbl.replace(" zbl ", " "),
        "both": f"pair_style hybrid/overlay mdband {models['lj']} dtype float64 device cpu "
        f"zbl 4.0 5.0\npair_coeff * * mdband\n{zbl}",
    }
    script = ""
    for name, pair in cases.items():
        script += f"""
clear
units metal
atom_style atomic
read_data {data}
{pair}
dump d all custom 1 {name}.dump id fx fy fz
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} $(pe:%.17g) $(press:%.17g)"
"""
    got = results(run_lmp(script, tmp_path).stdout)
    assert got["zbl"][0] > 1e-6  # the frame has atoms within the ZBL range
    assert got["both"][0] == pytest.approx(got["mdband"][0] + got["zbl"][0], rel=1e-12)
    assert got["both"][1] == pytest.approx(got["mdband"][1] + got["zbl"][1], rel=1e-10)
    f = {n: np.stack([read_dump(tmp_path / f"{n}.dump")[c] for c in ("fx", "fy", "fz")], 1)
         for n in cases}  # fmt: skip
    np.testing.assert_allclose(f["both"], f["mdband"] + f["zbl"], rtol=0, atol=1e-10)
