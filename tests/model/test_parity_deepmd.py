"""Parity with deepmd-kit 3.2.0 (fixtures from ../shared/tools/deepmd-reference, see
tests/fixtures/README.md): random-init checkpoints covering every supported option, and the
shared water checkpoint; and with a newer deepmd-kit source tree for the options of the 2026-09
presets (``newer_configs``, made by tests/fixtures/make_newer_deepmd_fixtures.py)."""

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest

import mdband

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
META = json.loads((FIX / "configs.json").read_text())
FRAMES = ase.io.read(FIX / META["structures"], index=":")
WATER = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dpa4-water-smoke"
needs_shared = pytest.mark.skipif(
    not (WATER / "pretrained.pt").exists(), reason="../shared (water checkpoint) absent"
)


def check(pot, ref, i, atoms, e_rel, f_abs, v_abs):
    r = pot.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.get_chemical_symbols())
    e = float(ref[f"energy_{i}"])
    assert abs(r.energy - e) <= e_rel * max(abs(e), 1.0), (r.energy, e)
    f = ref[f"forces_{i}"].reshape(-1, 3)
    assert np.abs(f).max() > 1e-3  # the reference is not trivially zero
    np.testing.assert_allclose(r.forces, f, rtol=0, atol=f_abs)
    np.testing.assert_allclose(
        r.atom_energy,
        ref[f"atom_energy_{i}"].reshape(-1),
        rtol=0,
        atol=max(f_abs, e_rel * max(abs(e), 1.0)),
    )
    if atoms.pbc.any():
        np.testing.assert_allclose(
            r.virial.reshape(9), ref[f"virial_{i}"].reshape(9), rtol=0, atol=v_abs
        )


ALL = sorted(META["configs"]) + sorted(META["newer_configs"])


@pytest.mark.parametrize("layout", ["band", "dense"])
@pytest.mark.parametrize("name", ALL)
def test_random_checkpoints_float64(name, layout):
    pot = mdband.load_model(FIX / f"{name}.pt", dtype="float64", rotation_layout=layout)
    assert pot.rotation_layout == layout
    ref = np.load(FIX / f"{name}.npz")
    assert len(FRAMES) == 4
    for i, atoms in enumerate(FRAMES):
        check(pot, ref, i, atoms, e_rel=1e-10, f_abs=1e-8, v_abs=1e-8)


@pytest.mark.parametrize("name", ALL)
def test_random_checkpoints_float32(name):
    """float32 forces within 1e-5 eV/Å of the float64 reference (which float64 mdband matches
    to 1e-8), so within 1e-5 of float64 mdband too."""
    pot = mdband.load_model(FIX / f"{name}.pt", dtype="float32")
    ref = np.load(FIX / f"{name}.npz")
    for i, atoms in enumerate(FRAMES):
        check(pot, ref, i, atoms, e_rel=1e-5, f_abs=1e-5, v_abs=1e-3)


def water_frames(ref):
    frames = []
    i = 0
    while f"coord_{i}" in ref:
        sym = [["O", "H"][t] for t in ref[f"atype_{i}"].reshape(-1)]
        frames.append(
            ase.Atoms(
                sym,
                positions=ref[f"coord_{i}"].reshape(-1, 3),
                cell=ref[f"cell_{i}"].reshape(3, 3),
                pbc=True,
            )
        )
        i += 1
    return frames


@needs_shared
@pytest.mark.parametrize(
    "dtype,e_rel,f_abs,v_abs", [("float64", 1e-10, 1e-8, 1e-8), ("float32", 1e-6, 1e-4, 1e-2)]
)
def test_water_checkpoint(dtype, e_rel, f_abs, v_abs):
    ref = np.load(FIX / f"water_{'fp64' if dtype == 'float64' else 'fp32'}.npz")
    pot = mdband.load_model(WATER / "pretrained.pt", dtype=dtype)
    frames = water_frames(ref)
    assert len(frames) >= 3 and len(frames[0]) == 192
    for i, atoms in enumerate(frames):
        check(pot, ref, i, atoms, e_rel=e_rel, f_abs=f_abs, v_abs=v_abs)
