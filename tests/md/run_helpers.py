"""What the MD run tests share: a short argon run's RunConfig and a console that prints to a
file."""

from rich.console import Console

from mdband.md import RunConfig


def argon_config(tmp_path, argon_xyz, lj_file, name="r", **kw) -> RunConfig:
    """Langevin at 80 K, 40 steps of 5 fs, frames every 5 and checkpoints every 10 steps into
    ``<name>.h5`` / ``<name>.ckpt`` / ``<name>.log`` under tmp_path; ``kw`` overrides any field."""
    base = dict(
        structure=str(argon_xyz),
        model=str(lj_file),
        ensemble="nvt-langevin",
        temperature=80.0,
        timestep=5.0,
        steps=40,
        seed=2,
        traj_every=5,
        checkpoint_every=10,
        trajectory=str(tmp_path / f"{name}.h5"),
        checkpoint=str(tmp_path / f"{name}.ckpt"),
        log=str(tmp_path / f"{name}.log"),
        dtype="float64",
        progress=False,
    )
    base.update(kw)
    return RunConfig(**base)


def quiet(tmp_path) -> Console:
    """A console appending to ``console.txt`` (runs print nothing to the test's output)."""
    return Console(file=open(tmp_path / "console.txt", "a"))
