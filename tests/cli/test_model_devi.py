"""``mdband model-devi``: dp model-devi's job, deepmd-kit's file layout, one-line errors."""

import ase.io
import numpy as np
import pytest
from ase.build import bulk
from click.testing import CliRunner

from mdband.cli import main
from mdband.committee import Committee
from mdband.testing.lj import lennard_jones_potential

HEADER = "#       step         max_devi_v         min_devi_v         avg_devi_v         max_devi_f"


@pytest.fixture
def models(tmp_path):
    pots = [
        lennard_jones_potential(),
        lennard_jones_potential(epsilon=0.0110),
        lennard_jones_potential(sigma=3.45, cutoff=8.0, r_on=6.8),
    ]
    paths = []
    for k, pot in enumerate(pots):
        paths.append(tmp_path / f"m{k}.mdband")
        pot.save(paths[-1])
    return pots, [str(p) for p in paths]


@pytest.fixture
def frames(tmp_path):
    images = []
    for seed in range(3):
        atoms = bulk("Ar", "fcc", a=5.3, cubic=True).repeat(2)
        atoms.rattle(0.15, seed=seed)
        images.append(atoms)
    path = tmp_path / "frames.extxyz"
    ase.io.write(path, images)
    return images, path


@pytest.mark.parametrize("atomic", [False, True])
def test_model_devi_writes_deepmd_layout(tmp_path, models, frames, atomic):
    pots, paths = models
    images, path = frames
    out = tmp_path / "model_devi.out"
    args = ["model-devi", *paths, "--structure", str(path), "-o", str(out), "--every", "10"]
    args += ["--dtype", "float64"] + (["--atomic"] if atomic else [])
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith(HEADER)
    data = np.loadtxt(out)
    assert data.shape == (3, 7 + 32 * atomic)
    np.testing.assert_array_equal(data[:, 0], [0, 10, 20])
    committee = Committee(pots)
    for row, atoms in zip(data, images):
        devi = committee.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers).deviation
        np.testing.assert_allclose(row[1:7], devi.row(), rtol=6e-7)
        if atomic:
            np.testing.assert_allclose(row[7:], devi.devi_f, rtol=6e-7)


def test_model_devi_refusals(tmp_path, models, frames):
    _, paths = models
    _, path = frames
    out = tmp_path / "model_devi.out"
    res = CliRunner().invoke(main, ["model-devi", paths[0], "-s", str(path), "-o", str(out)])
    assert res.exit_code == 2 and "at least two models" in res.output and not out.exists()
    out.write_text("keep me\n")
    res = CliRunner().invoke(main, ["model-devi", *paths, "-s", str(path), "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    assert out.read_text() == "keep me\n"
    kr = tmp_path / "kr.mdband"
    lennard_jones_potential(type_map=("Kr",)).save(kr)
    res = CliRunner().invoke(
        main, ["model-devi", paths[0], str(kr), "-s", str(path), "-o", str(out), "--overwrite"]
    )
    assert res.exit_code == 2 and "committee model 2" in res.output
    assert len(res.output.strip().splitlines()) == 1
