"""The real SeZM/DPA4 model through ``pair_style mdband``: the shared water checkpoint (192 atoms)
on 1 and 2 ranks, newton on and off, equals ``Potential.evaluate`` (float64). SeZM refreshes the
ghost rows of its node features before every block through the per-layer exchange."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from lammps_harness import DEVICE, NKTV2P_METAL, read_dump, requires_lammps, results, run_lmp

from mdband import load_model

SMOKE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dpa4-water-smoke"
CHECKPOINT = SMOKE / "pretrained.pt"
WATER = SMOKE / "water.lmp"

pytestmark = [
    requires_lammps,
    pytest.mark.skipif(
        not (CHECKPOINT.exists() and WATER.exists()),
        reason=f"shared DPA4 smoke data not found at {SMOKE}",
    ),
]


def _read_water():
    lines = WATER.read_text().splitlines()
    length = [float(line.split()[1]) for line in lines if line.endswith(("xhi", "yhi", "zhi"))]
    start = next(i for i, line in enumerate(lines) if line.startswith("Atoms"))
    rows = [line.split() for line in lines[start + 1 :] if line.strip()]
    rows.sort(key=lambda r: int(r[0]))
    types = np.array([int(r[1]) for r in rows])
    pos = np.array([[float(v) for v in r[2:5]] for r in rows])
    return pos, np.diag(length), types


def _case(name, newton):
    vir = " ".join(f"$(c_vir[{k}]:%.17g)" for k in range(1, 7))
    return f"""
clear
units metal
atom_style atomic
newton {newton}
read_data {WATER}
mass 1 15.999
mass 2 1.008
pair_style mdband {CHECKPOINT} dtype float64 device {DEVICE}
pair_coeff * * O H
compute pe all pe/atom
compute vir all pressure NULL virial
thermo_style custom step pe
dump d all custom 1 {name}.dump id fx fy fz c_pe
dump_modify d sort id format float %.17g
run 0
print "RESULT {name} $(pe:%.17g) {vir} $(vol:%.17g)"
undump d
"""


def test_sezm_water_parity(tmp_path):
    pos, cell, types = _read_water()
    pot = load_model(CHECKPOINT, dtype="float64")
    ref = pot.evaluate(pos, cell, True, [("O", "H")[t - 1] for t in types])
    w_ref = np.array(
        [ref.virial[a, b] for a, b in [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]]
    )
    runs = {1: ["on"], 2: ["on", "off"]}
    for nprocs, newtons in runs.items():
        work = tmp_path / f"np{nprocs}"
        script = "".join(_case(f"water-newton{n}", n) for n in newtons)
        got = results(run_lmp(script, work, nprocs=nprocs, timeout=900).stdout)
        for n in newtons:
            name = f"water-newton{n}"
            pe, *wp, vol = got[name]
            assert pe == pytest.approx(ref.energy, rel=1e-10), (nprocs, name)
            w = np.array(wp) * vol / NKTV2P_METAL
            assert np.max(np.abs(w - w_ref)) <= 1e-8, (nprocs, name, w, w_ref)
            dump = read_dump(work / f"{name}.dump")
            f = np.stack([dump["fx"], dump["fy"], dump["fz"]], axis=1)
            assert np.max(np.abs(f - ref.forces)) <= 1e-8, (nprocs, name)
            assert np.max(np.abs(dump["c_pe"] - ref.atom_energy)) <= 1e-10, (nprocs, name)
