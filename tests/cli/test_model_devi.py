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


def test_charge_spin_models_take_each_frames_own(tmp_path):
    """A committee of a charge/spin model (deepmd-kit's add_chg_spin_ebd) and a plain one on
    frames with their own info charge and spin: every row is Committee.evaluate's with that
    frame's values; --charge/--spin set all; a frame without and no default is one line."""
    from pathlib import Path

    import mdband

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd"
    paths = [str(fix / "chgspin.pt"), str(fix / "s2ffn.pt")]
    images = ase.io.read(fix / "structures.extxyz", ":3")
    for atoms, cs in zip(images, [(0, 1), (-1, 2), (2, 3)]):
        atoms.info.clear()
        atoms.info.update(charge=cs[0], spin=cs[1])
    path = tmp_path / "frames.extxyz"
    ase.io.write(path, images)
    committee = Committee([mdband.load_model(p, dtype="float64") for p in paths])

    def rows(*extra):
        out = tmp_path / "devi.out"
        res = CliRunner().invoke(main, ["model-devi", *paths, "-s", str(path), "-o", str(out),
                                        "--dtype", "float64", "--overwrite", *extra])  # fmt: skip
        assert res.exit_code == 0, res.output
        return np.loadtxt(out, ndmin=2)

    def expected(charges):
        out = []
        for a, (c, s) in zip(images, charges):
            d = committee.evaluate(a.positions, a.cell.array, a.pbc, a.numbers, charge=c,
                                   spin=s).deviation  # fmt: skip
            out.append([d.max_devi_v, d.max_devi_f])
        return np.array(out)

    own = [(a.info["charge"], a.info["spin"]) for a in images]
    want, want1 = expected(own), expected([(1, s) for _, s in own])
    assert np.abs(want - want1).min() > 1e-3  # the charge shows in the deviations
    np.testing.assert_allclose(rows()[:, [1, 4]], want, rtol=1e-6)  # the file's 7 digits
    np.testing.assert_allclose(rows("--charge", 1)[:, [1, 4]], want1, rtol=1e-6)
    for a in images:
        a.info.clear()
    ase.io.write(path, images)
    res = CliRunner().invoke(main, ["model-devi", *paths, "-s", str(path),
                                    "-o", str(tmp_path / "x.out")])  # fmt: skip
    assert res.exit_code == 2 and "system 0:" in res.output and "--charge --spin" in res.output
    assert len(res.output.strip().splitlines()) == 1
    plain = [str(fix / "s2ffn.pt"), str(fix / "zbl.pt")]
    res = CliRunner().invoke(main, ["model-devi", *plain, "-s", str(path), "--spin", 1,
                                    "-o", str(tmp_path / "y.out")])  # fmt: skip
    assert res.exit_code == 2 and "remove --spin" in res.output
