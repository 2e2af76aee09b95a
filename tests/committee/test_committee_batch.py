"""Committees evaluated in batches (Committee.evaluate_many, model_devi_frames): the deviations
of frame-by-frame evaluation and of deepmd-kit's calc_model_devi."""

import json
from pathlib import Path

import ase.io
import numpy as np
import pytest
from ase import Atoms
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.committee import Committee, model_devi_frames, read_model_devi
from mdband.committee import frames as committee_frames
from mdband.errors import UnknownElementError
from mdband.model.factory import random_potential
from mdband.testing.sezm import small_config

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"


def periodic_frame(seed) -> Atoms:
    rng = np.random.default_rng(seed)
    cell = np.array([[6.0, 0.0, 0.0], [0.8, 6.2, 0.0], [-0.5, 0.4, 5.8]])
    grid = np.stack(np.meshgrid(*[np.arange(2)] * 3, indexing="ij"), -1).reshape(-1, 3)
    frac = (grid + 0.5) / 2 + rng.normal(scale=0.03, size=grid.shape)
    numbers = rng.choice([1, 6, 8], size=len(frac))
    return Atoms(numbers=numbers, scaled_positions=frac, cell=cell, pbc=True)


def open_frame(seed) -> Atoms:
    rng = np.random.default_rng(seed)
    pos = np.array([[0, 0, 0], [1.4, 0, 0], [0, 1.5, 0], [0, 0, 1.3], [1.3, 1.2, 1.1]], float)
    pos += rng.normal(scale=0.05, size=pos.shape)
    return Atoms(numbers=[6, 8, 1, 1, 8], positions=pos, pbc=False)


def mixed_frames():
    big = periodic_frame(3).repeat((2, 1, 1))
    return [periodic_frame(0), open_frame(1), big, open_frame(2), periodic_frame(4)]


def committee_of(sezm_models):
    """Two models of one config and one with another cutoff and type map order."""
    other = random_potential(small_config(rcut=3.5, type_map=("O", "C", "H")), seed=9, gain=0.5)
    return Committee([*sezm_models[:2], other])


def test_evaluate_many_equals_frame_by_frame(sezm_models):
    committee = committee_of(sezm_models)
    frames = mixed_frames()
    many = committee.evaluate_many(frames, batch_size=2)
    for atoms, got in zip(frames, many):
        ref = committee.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        np.testing.assert_allclose(got.deviation.row(), ref.deviation.row(), rtol=1e-9,
                                   atol=1e-13)  # fmt: skip
        np.testing.assert_allclose(got.deviation.devi_f, ref.deviation.devi_f, atol=1e-12)
        assert got.deviation.devi_e == pytest.approx(ref.deviation.devi_e, rel=1e-9, abs=1e-14)
        for a, b in zip(got.results, ref.results):
            assert a.energy == pytest.approx(b.energy, rel=1e-12)
            np.testing.assert_allclose(a.forces, b.forces, atol=1e-10)


def test_model_devi_frames_in_blocks(sezm_models, tmp_path, monkeypatch):
    committee = committee_of(sezm_models)
    frames = mixed_frames()
    monkeypatch.setattr(committee_frames, "BLOCK_FRAMES", 2)  # three blocks
    rows = model_devi_frames(committee, frames, tmp_path / "devi.out", every=5, batch_atoms=20)
    assert [step for step, _ in rows] == [0, 5, 10, 15, 20]
    table = read_model_devi(tmp_path / "devi.out")
    assert table.shape[0] == 5
    for (_, devi), atoms in zip(rows, frames):
        ref = committee.evaluate(atoms.positions, atoms.cell.array, atoms.pbc, atoms.numbers)
        np.testing.assert_allclose(devi.row(), ref.deviation.row(), rtol=1e-9, atol=1e-13)


def test_unknown_element_names_the_model(sezm_models):
    committee = committee_of(sezm_models)
    with pytest.raises(UnknownElementError, match="committee model 1: system 1: element"):
        committee.evaluate_many([open_frame(1), Atoms("Fe", positions=[[0, 0, 0]])])


def test_batched_deviations_match_deepmd_kit():
    """deepmd-kit 3.2.0's calc_model_devi of three checkpoints on four frames (the fixture of
    test_deepmd_model_devi.py), all frames in one batch per model."""
    ref = np.load(FIX / "model_devi.npz")
    models = json.loads(str(ref["meta"]))["models"]
    committee = Committee([mdband.load_model(FIX / f"{m}.pt", dtype="float64") for m in models])
    frames = ase.io.read(FIX / "structures.extxyz", index=":")
    for i, res in enumerate(committee.evaluate_many(frames)):
        devi, row = res.deviation, ref[f"devi_{i}"]
        np.testing.assert_allclose(devi.row()[3:], row[4:7], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(devi.devi_f, row[8:], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(devi.row()[:3], row[1:4], rtol=1e-9, atol=1e-12)


def test_cli_batch_flags(tmp_path, sezm_models):
    paths = []
    for k, pot in enumerate(sezm_models[:2]):
        paths.append(tmp_path / f"m{k}.mdband")
        pot.save(paths[-1])
    ase.io.write(tmp_path / "f.extxyz", mixed_frames())
    args = ["model-devi", *map(str, paths), "-s", str(tmp_path / "f.extxyz"), "--dtype", "float64"]
    res = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "a.out"), "--batch-size", "2"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "b.out"), "--batch-atoms", "1"])
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(np.loadtxt(tmp_path / "a.out"), np.loadtxt(tmp_path / "b.out"),
                               rtol=1e-9, atol=1e-13)  # fmt: skip
    res = CliRunner().invoke(main, [*args, "-o", str(tmp_path / "c.out"), "--batch-size", "0"])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert "--batch-size must be a positive integer" in res.stderr
