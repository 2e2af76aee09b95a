"""RunConfig validation, TOML-style mappings and the resume merge."""

import pytest

from mdband.md import ENSEMBLES, ConfigError, RunConfig
from mdband.md.config import merge_for_resume, normalise_mapping

BASE = {"structure": "s.xyz", "model": "m.mdband"}


def make(**kw):
    return RunConfig(**{**BASE, **kw})


def test_defaults_and_resolution():
    c = make()
    assert c.ensemble == "nve" and c.steps == 1000 and c.timestep == 1.0
    r = make(timestep=2.0).resolved()
    assert r.tdamp == 200.0 and r.pdamp == 2000.0
    assert isinstance(r.seed, int) and r.seed >= 0
    assert make(seed=5).resolved().seed == 5
    assert set(ENSEMBLES) == {"nve", "nvt-langevin", "nvt-bussi", "nvt-nhc", "npt-mtk"}


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"timestep": 0.0}, "timestep must be positive"),
        ({"timestep": -1.0}, "timestep must be positive"),
        ({"steps": 0}, "steps must be positive"),
        ({"steps": -5}, "steps must be positive"),
        ({"temperature": -1.0}, "temperature must be >= 0"),
        ({"ensemble": "nvt-nhc", "temperature": 0.0}, "needs a temperature > 0"),
        ({"ensemble": "nvt"}, "ensemble must be one of"),
        ({"barostat": "tri"}, "barostat must be isotropic or full"),
        ({"dtype": "float16"}, "dtype must be float32 or float64"),
        ({"traj_every": 0}, "traj_every must be positive"),
        ({"friction": -1.0}, "friction must be positive"),
        ({"tdamp": 0.0}, "tdamp must be positive"),
        ({"timestep": float("nan")}, "timestep must be a finite number"),
        ({"steps": 2.5}, "steps must be an integer"),
        ({"progress": "yes"}, "progress must be true or false"),
        ({"model": 3}, "model must be a string"),
        ({"resume": True}, "resume needs a checkpoint"),
        ({"model": None}, "no model"),
        ({"structure": None}, "no structure"),
        ({"min_distance": -0.1}, "min_distance"),
        ({"threads": 0}, "threads must be >= 1"),
        ({"seed": -3}, "seed must be >= 0"),
    ],
)
def test_bad_settings_are_named(kw, message):
    with pytest.raises(ConfigError, match=message):
        make(**kw)


def test_mapping_keys_and_relative_paths(tmp_path):
    data = {"traj-every": 10, "structure": "in/a.xyz", "model": "/abs/m.mdband", "temperature": 300}
    out = normalise_mapping(data, base_dir=tmp_path)
    assert out["traj_every"] == 10
    assert out["structure"] == str(tmp_path / "in" / "a.xyz")
    assert out["model"] == "/abs/m.mdband"
    c = RunConfig.from_mapping(data, base_dir=tmp_path)
    assert c.temperature == 300.0 and isinstance(c.temperature, float)
    with pytest.raises(ConfigError, match="unknown setting 'temprature'"):
        normalise_mapping({"temprature": 3})


def test_merge_for_resume():
    recorded = make(ensemble="nvt-nhc", temperature=500.0, steps=100, seed=9).resolved()
    recorded = {**recorded.to_dict(), "checkpoint": "c.ckpt"}
    merged = merge_for_resume(recorded, {"resume": True, "steps": 300, "log": "x.log"})
    assert merged.steps == 300 and merged.temperature == 500.0 and merged.seed == 9
    assert merged.resume and merged.log == "x.log" and merged.tdamp == 100.0
    same = merge_for_resume(recorded, {"resume": True, "temperature": 500, "tdamp": 100.0})
    assert same.temperature == 500.0
    with pytest.raises(
        ConfigError, match="ensemble .nvt-nhc. -> .nve.; temperature 500.0 -> 300.0"
    ):
        merge_for_resume(recorded, {"resume": True, "temperature": 300.0, "ensemble": "nve"})
    with pytest.raises(ConfigError, match="timestep"):
        merge_for_resume(recorded, {"resume": True, "timestep": 2.0})


def test_builtin_model_in_toml_is_not_a_path(tmp_path):
    from mdband.md.config import normalise_mapping

    out = normalise_mapping({"model": "builtin:emt-cuni", "structure": "a.xyz"}, tmp_path)
    assert out["model"] == "builtin:emt-cuni"
    assert out["structure"] == str(tmp_path.resolve() / "a.xyz")
