"""One table, two spellings: every RunConfig setting is a flag and a TOML key, and both
round-trip through ``mdband run --print-config``."""

from dataclasses import MISSING, fields
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from click.testing import CliRunner

from mdband.cli import main
from mdband.cli.run import command as run_command
from mdband.md.config import PATH_FIELDS, RunConfig
from mdband.md.setting_table import table
from mdband.testing.lj import lennard_jones_potential

SPECS = {spec.name: spec for spec in table(RunConfig)}
# values the generic rule below would get wrong (validated formats); resume needs a real
# checkpoint and has its own test
SPECIAL = {
    "device": "cuda:1",
    "format": "lammps-data",
    "type_map": "O,H",
    "final": "end.extxyz",
    "memory_budget": "40GB",
}
OWN_TEST = {"resume"}
# settings valid only together with another one
COMPANIONS = {"committee": {"model_devi": "devi.out"}, "model_devi": {"committee": ["b.mdband"]}}


def sample(spec):
    """A valid value different from the default."""
    if spec.name in SPECIAL:
        return SPECIAL[spec.name]
    default = None if spec.default is MISSING else spec.default
    if spec.choices:
        value = next(c for c in spec.choices if c != default)
    elif spec.kind == "bool":
        value = not default
    elif spec.kind == "int":
        value = (default or 0) + 3
    elif spec.kind == "float":
        value = (default or 0.0) + 1.5
    else:
        value = f"x_{spec.name}"
    return [value, value] if spec.is_list else value


def flag_args(spec, value):
    if spec.kind == "bool" and not spec.is_list:
        return [spec.flag if value else f"--no-{spec.flag[2:]}"]
    if spec.is_list:
        return [spec.flag, ",".join(map(str, value))]
    return [spec.flag, str(value)]


def toml_line(name, value):
    from mdband.md.setting_table import _toml_value

    return f"{name} = {_toml_value(value)}\n"


def invoke(*args):
    return CliRunner().invoke(main, ["run", *map(str, args)])


BASE = {"structure": "s.xyz", "model": "m.mdband", "seed": 1}


def printed(*args):
    res = invoke(*args, "--print-config")
    assert res.exit_code == 0, res.output
    return res.stdout


def test_every_setting_has_help_a_flag_and_a_key():
    options = {p.name: p for p in run_command.params}
    for f in fields(RunConfig):
        spec = SPECS[f.name]
        assert spec.info is not None and spec.info.help, f"{f.name}: declare it with setting()"
        assert f.name in options, f"{f.name} has no mdband run flag"
        assert spec.flag in options[f.name].opts
        assert f"    {f.name} : " in RunConfig.__doc__, f"{f.name} missing from the docstring"
    assert set(options) - set(SPECS) == {"config_file", "print_config"}


@pytest.mark.parametrize("name", [n for n in SPECS if n not in OWN_TEST])
def test_flag_and_toml_key_round_trip(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    spec = SPECS[name]
    value = sample(spec)
    settings = {**BASE, **COMPANIONS.get(name, {}), name: value}
    args = [a for k, v in settings.items() for a in flag_args(SPECS[k], v)]
    text = printed(*args)
    parsed = tomllib.loads(text)
    expected = value
    if name in PATH_FIELDS:
        expected = str(tmp_path / value)
    if name == "committee":  # a list of model paths
        expected = [str(tmp_path / v) for v in value]
    assert parsed[name] == expected
    # every setting is written (a None one as a comment), in field order
    keys = [line.split(" ")[0 if not line.startswith("# ") else 1] for line in text.splitlines()]
    assert [k for k in keys if k in SPECS] == list(SPECS)
    # the same setting as a TOML key gives the same resolved configuration
    (tmp_path / "key.toml").write_text("".join(toml_line(k, v) for k, v in settings.items()))
    assert printed("--config", "key.toml") == text
    # and the printed file loads back to itself (from another directory, too)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "printed.toml").write_text(text)
    assert printed("--config", other / "printed.toml") == text


def test_hyphenated_toml_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.toml").write_text('structure = "s.xyz"\nmodel = "m.mdband"\ntraj-every = 7\n')
    assert tomllib.loads(printed("--config", "a.toml"))["traj_every"] == 7


def test_print_config_of_a_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from ase.build import bulk
    from ase.io import write

    write(tmp_path / "ar.xyz", bulk("Ar", "fcc", a=5.26, cubic=True))
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    first = ["--structure", "ar.xyz", "--model", "lj.mdband", "--steps", 4, "--seed", 9]
    res = invoke(*first, "--checkpoint", "c.ckpt", "--no-progress", "--temperature", 40)
    assert res.exit_code == 0, res.output
    text = printed("--resume", "--checkpoint", "c.ckpt", "--steps", 8)
    parsed = tomllib.loads(text)
    assert parsed["resume"] is True and parsed["steps"] == 8
    assert parsed["seed"] == 9 and parsed["temperature"] == 40.0  # from the checkpoint
    assert parsed["checkpoint"] == str(tmp_path / "c.ckpt")
    # the resume key in TOML: the printed file, or just the two keys, resolve the same
    (tmp_path / "printed.toml").write_text(text)
    assert printed("--config", "printed.toml") == text
    (tmp_path / "keys.toml").write_text('resume = true\ncheckpoint = "c.ckpt"\nsteps = 8\n')
    assert printed("--config", "keys.toml") == text


def test_print_config_loads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import mdband.loader
    import mdband.md.system

    def forbidden(*a, **k):
        raise AssertionError("--print-config must not load anything")

    monkeypatch.setattr(mdband.loader, "load_model", forbidden)
    monkeypatch.setattr(mdband.md.system, "read_structure", forbidden)
    args = ["--structure", "absent.xyz", "--model", "absent.pt", "--trajectory", "t.h5"]
    text = printed(*args, "--checkpoint", "c.ckpt", "--log", "r.log")
    assert "trajectory = " in text and list(Path(tmp_path).iterdir()) == []
    # the seed is drawn once and recorded, so running the printed file reproduces it
    assert isinstance(tomllib.loads(text)["seed"], int)


BAD_FLAGS = {
    "skin": (["--skin", "-1"], "min_distance and skin must be >= 0"),
    "skin text": (["--skin", "wide"], "'wide' is not a valid float"),
    "barostat": (["--barostat", "tri"], "'tri' is not one of 'isotropic', 'full'"),
    "tchain": (["--tchain", "0"], "tchain must be positive"),
    "pchain": (["--pchain", "-2"], "pchain must be positive"),
    "tloop": (["--tloop", "0"], "tloop must be positive"),
    "ploop": (["--ploop", "1.5"], "'1.5' is not a valid integer"),
    "traj-precision": (["--traj-precision", "float16"], "'float16' is not one of"),
    "traj-force-unit": (["--traj-force-unit", "N"], "'N' is not one of"),
    "velocities": (["--velocities", "random"], "'random' is not one of"),
    "device": (["--device", "gpu"], "device must be auto, cpu, cuda or cuda:N; got 'gpu'"),
    "print-config": (["--print-config=yes"], "does not take a value"),
    "no-resume value": (["--no-resume=1"], "does not take a value"),
}


@pytest.mark.parametrize("case", list(BAD_FLAGS))
def test_bad_values_of_new_flags_are_one_line(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    args, message = BAD_FLAGS[case]
    res = invoke("--structure", "s.xyz", "--model", "m.mdband", *args, "--print-config")
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mdband: error: ") and message in lines[0]
    assert res.stdout == "" and list(tmp_path.iterdir()) == []


def test_unknown_head_is_one_line(tmp_path, monkeypatch):
    """A head name is free text until the model is read; a checkpoint without it refuses."""
    monkeypatch.chdir(tmp_path)
    ckpt = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd" / "gated_pyramid.pt"
    (tmp_path / "one.xyz").write_text("1\n\nH 0 0 0\n")
    res = invoke("--structure", "one.xyz", "--model", ckpt, "--head", "nosuch", "--steps", 1)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "no head 'nosuch'" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.xyz"]
