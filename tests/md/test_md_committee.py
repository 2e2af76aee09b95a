"""``mdband run`` with a committee: dynamics untouched, model_devi.out, H5MD observables, resume."""

import numpy as np
import pytest

from mdband import UnknownElementError
from mdband.committee import Committee, model_devi_frames, read_model_devi
from mdband.committee.frames import read_frames
from mdband.io.h5md import H5MDReader
from mdband.md import ConfigError, OutputExistsError, RunConfig, run
from mdband.md.config import normalise_mapping
from mdband.testing.lj import lennard_jones_potential

DEVI = ("max_devi_v", "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f")


@pytest.fixture
def members(tmp_path):
    """Two more LJ models (other ε, other σ and cutoff), saved as files."""
    pots = [
        lennard_jones_potential(epsilon=0.0110),
        lennard_jones_potential(sigma=3.45, cutoff=8.0, r_on=6.8),
    ]
    paths = [tmp_path / "m1.mdband", tmp_path / "m2.mdband"]
    for pot, path in zip(pots, paths):
        pot.save(path)
    return pots, [str(p) for p in paths]


def config(tmp_path, argon_xyz, lj_file, name, steps, others=(), **kw):
    settings = dict(
        structure=str(argon_xyz),
        model=[str(lj_file), *others],
        ensemble="nvt-langevin",
        friction=5.0,
        temperature=80.0,
        timestep=5.0,
        seed=7,
        skin=1.0,
        traj_every=5,
        checkpoint_every=5,
        traj_precision="float64",
        trajectory=str(tmp_path / f"{name}.h5"),
        checkpoint=str(tmp_path / f"{name}.ckpt"),
        dtype="float64",
        progress=False,
        steps=steps,
    )
    if others:
        settings.update(model_devi=str(tmp_path / f"{name}.out"), model_devi_every=2)
    settings.update(kw)
    return RunConfig(**settings)


def test_committee_leaves_dynamics_bitwise_and_writes_deviations(
    tmp_path, argon_xyz, lj_file, lj, members
):
    pots, paths = members
    single = run(config(tmp_path, argon_xyz, lj_file, "single", 20), potential=lj)
    multi = run(config(tmp_path, argon_xyz, lj_file, "multi", 20, paths), potential=lj)
    for getter in ("get_positions", "get_momenta"):
        assert getattr(single.atoms, getter)().tobytes() == getattr(multi.atoms, getter)().tobytes()
    committee = Committee([lj, *pots])
    rows = read_model_devi(tmp_path / "multi.out")
    np.testing.assert_array_equal(rows[:, 0], np.arange(0, 21, 2))
    with H5MDReader(tmp_path / "single.h5") as ra, H5MDReader(tmp_path / "multi.h5") as rb:
        assert "max_devi_f" not in ra.frame(0).observables
        np.testing.assert_array_equal(ra.steps, rb.steps)
        for fa, fb in zip(ra, rb):
            for name in ("positions", "velocities", "forces", "cell"):
                assert getattr(fa, name).tobytes() == getattr(fb, name).tobytes(), name
            for name, value in fa.observables.items():
                np.testing.assert_array_equal(value, fb.observables[name])
            devi = committee.evaluate(fb.positions, fb.cell, True, rb.species).deviation
            for name in DEVI:  # the frame's own deviations, to float64 rounding
                np.testing.assert_allclose(fb.observables[name], getattr(devi, name), rtol=1e-12)
            if fb.step % 2 == 0:  # and the file's row of that step, to its 7 digits
                row = rows[rows[:, 0] == fb.step][0]
                obs = [fb.observables[name] for name in DEVI]
                np.testing.assert_allclose(row[1:], obs, rtol=6e-7)
    assert rows[:, 4].min() > 1e-4  # the models disagree
    # mdband model-devi's reader: the trajectory's frames with their own steps
    frames, steps = read_frames(tmp_path / "multi.h5")
    again = model_devi_frames(committee, frames, steps=steps)
    assert [s for s, _ in again] == list(range(0, 21, 5))
    for step, devi in again:
        if step % 2 == 0:
            np.testing.assert_allclose(devi.row(), rows[rows[:, 0] == step][0, 1:], rtol=6e-7)


@pytest.mark.parametrize("atomic", [False, True])
def test_resume_continues_model_devi_exactly(tmp_path, argon_xyz, lj_file, lj, members, atomic):
    _, paths = members
    kw = {"model_devi_atomic": atomic}
    run(config(tmp_path, argon_xyz, lj_file, "whole", 20, paths, **kw), potential=lj)
    run(config(tmp_path, argon_xyz, lj_file, "split", 10, paths, **kw), potential=lj)
    with open(tmp_path / "split.out", "a") as fh:  # rows of a run killed after its checkpoint
        fh.write((tmp_path / "whole.out").read_text().splitlines(keepends=True)[7])
        fh.write("          14       3.1")
    resumed = config(tmp_path, argon_xyz, lj_file, "split", 20, paths, resume=True, **kw)
    run(resumed, potential=lj)
    assert (tmp_path / "split.out").read_bytes() == (tmp_path / "whole.out").read_bytes()
    assert read_model_devi(tmp_path / "whole.out").shape == (11, 7 + 32 * atomic)


def test_committee_settings(tmp_path, argon_xyz, lj_file, members):
    _, paths = members
    c = config(tmp_path, argon_xyz, lj_file, "c", 5, paths)
    assert c.model == str(lj_file) and list(c.committee) == list(paths)
    assert RunConfig(**c.to_dict()) == c  # what a checkpoint records reads back
    models = ["a.mdband", "builtin:emt-cuni"]
    data = normalise_mapping({"model": models, "model-devi": "d.out"}, "/x")
    assert data["model"] == "/x/a.mdband" and data["committee"] == ("builtin:emt-cuni",)
    assert data["model_devi"] == "/x/d.out"
    bad = [
        ({"model_devi": None}, "needs a model deviation file"),
        ({"model": str(lj_file)}, "model_devi needs a committee"),
        ({"engine": "lammps"}, "not available with engine lammps"),
        ({"model_devi_every": 0}, "model_devi_every must be positive"),
        ({"committee": ("x.mdband",)}, "either as a list of models or as committee"),
    ]
    for kw, message in bad:
        with pytest.raises(ConfigError, match=message):
            config(tmp_path, argon_xyz, lj_file, "bad", 5, paths, **kw)


def test_existing_model_devi_refused_and_unknown_element(tmp_path, argon_xyz, lj_file, members):
    _, paths = members
    out = tmp_path / "taken.out"
    out.write_text("keep\n")
    with pytest.raises(OutputExistsError, match="model_devi file"):
        run(config(tmp_path, argon_xyz, lj_file, "x", 5, paths, model_devi=str(out)))
    assert out.read_text() == "keep\n" and not (tmp_path / "x.h5").exists()
    kr = tmp_path / "kr.mdband"
    lennard_jones_potential(type_map=("Kr",)).save(kr)
    with pytest.raises(UnknownElementError, match="committee model 2: element"):
        run(config(tmp_path, argon_xyz, lj_file, "y", 5, [str(kr)]))
    assert not (tmp_path / "y.h5").exists() and not (tmp_path / "y.out").exists()


def test_model_devi_is_locked_recorded_and_never_an_input(
    tmp_path, argon_xyz, lj_file, lj, members
):
    import os

    from mdband.io.checkpoint import read_checkpoint
    from mdband.io.locks import OutputLock, OutputLockedError

    _, paths = members
    c = config(tmp_path, argon_xyz, lj_file, "l", 5, paths)
    before = sorted(p.name for p in tmp_path.iterdir())
    with OutputLock(c.model_devi, "model_devi"):  # as another run holds it
        with pytest.raises(OutputLockedError, match=f"model_devi .*l.out .*PID {os.getpid()}"):
            run(c, potential=lj)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created, no lock left
    for kw, message in [
        ({"model_devi": str(argon_xyz)}, "model_devi file .* is the structure"),
        ({"log": paths[1]}, "log file .* is the committee model 3"),
    ]:
        with pytest.raises(ConfigError, match=message):
            run(config(tmp_path, argon_xyz, lj_file, "l", 5, paths, overwrite=True, **kw))
        assert sorted(p.name for p in tmp_path.iterdir()) == before
    run(c, potential=lj)
    ck = read_checkpoint(c.checkpoint)
    assert ck.outputs["model_devi"] == {"path": str((tmp_path / "l.out").resolve())}
    assert ck.config["committee"] == [str(tmp_path / "m1.mdband"), str(tmp_path / "m2.mdband")]
    assert not any(p.name.endswith(".lock") for p in tmp_path.iterdir())
