"""Dynamics through ``pair_style mdband``: NVE independent of the rank count, minimize, fix npt."""

from __future__ import annotations

import re

import numpy as np
import pytest
from lammps_harness import (
    DEVICE,
    ELEMENTS,
    make_frame,
    requires_lammps,
    results,
    run_lmp,
    write_data,
)

pytestmark = requires_lammps

THERMO = "step temp pe ke etotal press pxx pyy pzz pxy pxz pyz"


def _thermo_lines(stdout: str) -> list[str]:
    """The thermo table of the (only) run, as printed."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["Step", "Temp"])
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("Loop time"))
    keep = re.compile(r"^\s*(Step\s|\d)")
    return [line.rstrip() for line in lines[start:end] if keep.match(line)]


@pytest.fixture(scope="module")
def nve_data(tmp_path_factory):
    frame = make_frame(grid=(6, 6, 6), spacing=3.8, jitter=0.1, seed=7)
    return write_data(tmp_path_factory.mktemp("nve") / "nve.data", frame)


@pytest.fixture(scope="module")
def nve_runs(nve_data, models, tmp_path_factory):
    """100 NVE steps of the mp2 model on 1, 2 and 4 ranks (float64)."""
    script = f"""
units metal
atom_style atomic
read_data {nve_data}
pair_style mdband {models["mp2"]} dtype float64 device {DEVICE}
pair_coeff * * {" ".join(ELEMENTS)}
neighbor 1.0 bin
neigh_modify every 1 delay 0 check yes
velocity all create 150.0 4928459 loop geom dist gaussian
timestep 0.005
fix 1 all nve
thermo 10
thermo_style custom {THERMO}
variable e equal etotal
fix p all print 10 "FULL $(step) $(pe:%.17g) $(ke:%.17g) $(press:%.17g)" screen yes
run 100
print "RESULT final $(pe:%.17g) $(etotal:%.17g)"
"""
    out = {}
    for n in (1, 2, 4):
        out[n] = run_lmp(script, tmp_path_factory.mktemp(f"nve{n}"), nprocs=n).stdout
    return out


def test_nve_thermo_identical_across_ranks(nve_runs):
    tables = {n: _thermo_lines(s) for n, s in nve_runs.items()}
    assert len(tables[1]) == 12  # header + steps 0, 10, ..., 100
    assert tables[2] == tables[1]
    assert tables[4] == tables[1]


def test_nve_full_precision_and_energy_conservation(nve_runs):
    full = {}
    for n, s in nve_runs.items():
        rows = re.findall(r"^FULL (\S+) (\S+) (\S+) (\S+)$", s, re.M)
        full[n] = np.array(rows, dtype=float)
    assert full[1].shape == (11, 4)
    for n in (2, 4):
        np.testing.assert_allclose(full[n], full[1], rtol=1e-10, atol=1e-10)
    etot = full[1][:, 1] + full[1][:, 2]
    assert full[1][-1, 2] > 0.01  # the atoms moved
    assert np.max(np.abs(etot - etot[0])) < 2e-4 * len(etot)  # eV, 216 atoms, dt = 5 fs


def test_minimize_and_npt(models, tmp_path):
    """A compressed argon-like crystal: minimize lowers the energy to the same minimum on 1 and 2
    ranks; fix npt at 0 bar (triclinic) expands the box, so the virial has the right sign."""
    frame = make_frame(grid=(5, 5, 5), spacing=3.55, tilt=(0.1, 0.0, 0.05), jitter=0.08, seed=11)
    data = write_data(tmp_path / "min.data", frame)
    setup = f"""
clear
units metal
atom_style atomic
read_data {data}
pair_style mdband {models["lj"]} dtype float64 device {DEVICE}
pair_coeff * * {" ".join(ELEMENTS)}
neighbor 1.0 bin
thermo_style custom step pe press vol
"""
    script = f"""{setup}
run 0
print "RESULT start $(pe:%.17g) $(press:%.17g) $(vol:%.17g)"
minimize 0.0 1.0e-10 100 1000
print "RESULT min $(pe:%.17g) $(fnorm:%.17g)"
{setup}
velocity all create 40.0 87287 loop geom
fix 1 all npt temp 40.0 40.0 0.1 tri 0.0 0.0 0.4
timestep 0.004
run 100
print "RESULT npt $(pe:%.17g) $(press:%.17g) $(vol:%.17g) $(xy:%.17g)"
"""
    got = {n: results(run_lmp(script, tmp_path / f"np{n}", nprocs=n).stdout) for n in (1, 2)}
    for n, r in got.items():
        pe0, p0, v0 = r["start"]
        pe_min, fnorm = r["min"]
        assert p0 > 1000.0, n  # bar: compressed
        assert pe_min < pe0 - 1.0, n
        assert fnorm < 0.1, n  # from 0.8 eV/Å
        assert r["npt"][2] > 1.01 * v0, n  # positive virial pressure drove an expansion
    assert got[2]["min"][0] == pytest.approx(got[1]["min"][0], rel=1e-8)
    np.testing.assert_allclose(got[2]["npt"], got[1]["npt"], rtol=1e-6, atol=1e-6)
