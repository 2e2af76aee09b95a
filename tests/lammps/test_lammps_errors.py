"""Input mistakes stop LAMMPS with a clear one-line error (and never hang under MPI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from lammps_harness import DEVICE, ELEMENTS, make_frame, requires_lammps, run_lmp, write_data

pytestmark = requires_lammps
SPIN_NATIVE = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin" / "spin_native.pt"


def _script(data, units="metal", pair_style=None, coeff=None):
    return f"""
units {units}
atom_style atomic
read_data {data}
{pair_style}
{coeff or "pair_coeff * * " + " ".join(ELEMENTS)}
run 0
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    frame = make_frame(grid=(3, 3, 3), spacing=3.8, seed=2)
    return write_data(tmp_path_factory.mktemp("err") / "err.data", frame)


@pytest.mark.parametrize(
    "case, nprocs, expected",
    [
        ("unknown-element", 1, "element(s) Xe not in the model's type map ['Ar', 'Kr']"),
        ("unknown-element", 2, "element(s) Xe not in the model's type map ['Ar', 'Kr']"),
        ("units-lj", 1, "pair_style mdband does not support 'units lj'"),
        ("missing-model", 1, "does-not-exist.pt does not exist"),
        ("coeff-count", 1, "one element per atom type"),
        ("bad-dtype", 1, "dtype must be float32 or float64"),
        ("spin-model", 1, "is a native spin model"),
    ],
)
def test_errors(case, nprocs, expected, data, models, tmp_path):
    style = f"pair_style mdband {models['lj']} dtype float64 device {DEVICE}"
    kw = {"pair_style": style}
    if case == "unknown-element":
        kw["coeff"] = "pair_coeff * * Ar Xe"
    elif case == "units-lj":
        kw["units"] = "lj"
    elif case == "missing-model":
        kw["pair_style"] = "pair_style mdband does-not-exist.pt"
    elif case == "coeff-count":
        kw["coeff"] = "pair_coeff * * Ar"
    elif case == "bad-dtype":
        kw["pair_style"] = f"pair_style mdband {models['lj']} dtype float16"
    elif case == "spin-model":
        kw["pair_style"] = f"pair_style mdband {SPIN_NATIVE} dtype float64 device {DEVICE}"
        kw["coeff"] = "pair_coeff * * Fe Ni"
    proc = run_lmp(_script(data, **kw), tmp_path, nprocs=nprocs, timeout=180, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-2000:]
    errors = [line for line in text.splitlines() if line.startswith("ERROR")]
    assert errors, text[-2000:]
    assert expected in errors[0], errors[0]
    assert "Traceback" not in text  # user errors are one line, no Python traceback
