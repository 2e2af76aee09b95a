"""Command-line conventions: -h/--help everywhere, -V/--version, -v/-q through logging, and
one device rule (auto = CUDA when available, else CPU) in every front end."""

import inspect
import logging

import ase.io
import pytest
import torch
from ase.build import bulk
from click.testing import CliRunner

import mdband
from mdband.cli import main
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    logger = logging.getLogger("mdband")
    for handler in list(logger.handlers):
        if getattr(handler, "mdband_cli", False):
            logger.removeHandler(handler)
    logger.setLevel(logging.NOTSET)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True).repeat(2)
    atoms.rattle(0.05, seed=1)
    ase.io.write(tmp_path / "ar.xyz", atoms)
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    return tmp_path


def cli(*args):
    return CliRunner().invoke(main, list(map(str, args)))


RUN = ("--structure", "ar.xyz", "--model", "lj.mdband", "--steps", 4, "--traj-every", 2)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_on_the_group_and_every_subcommand(flag):
    res = cli(flag)
    assert res.exit_code == 0 and res.stdout.startswith("Usage: ")
    commands = main.list_commands(None)
    assert {"run", "relax", "info", "fit", "convert"} <= set(commands)
    for name in commands:
        res = cli(name, flag)
        assert res.exit_code == 0, (name, res.output)
        assert res.stdout.startswith("Usage: ") and f" {name} " in res.stdout.splitlines()[0]


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag):
    res = cli(flag)
    assert res.exit_code == 0 and res.stdout == f"mdband, version {mdband.__version__}\n"


def test_default_verbosity_logs_nothing(work):
    res = cli("run", *RUN, "--no-progress", "--checkpoint", "c.ckpt")
    assert res.exit_code == 0, res.output
    assert res.stderr == "" and "Step" in res.stdout


def test_verbose_logs_model_load_and_checkpoints(work):
    res = cli("-v", "run", *RUN, "--no-progress", "--checkpoint", "c.ckpt")
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "INFO" in err and "loaded model lj.mdband" in err and "checkpoint written" in err
    assert "DEBUG" not in err and "Step" in res.stdout  # logs on stderr, table on stdout


def test_very_verbose_logs_neighbour_rebuilds(work):
    res = cli("-vv", "run", *RUN, "--no-progress", "--skin", 0.5)
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "DEBUG" in err and "neighbour list rebuilt" in err


def test_quiet_silences_stdout_not_errors(work):
    res = cli("-q", "run", *RUN, "--log", "r.log", "--trajectory", "t.h5")
    assert res.exit_code == 0, res.output
    assert res.stdout == "" and res.stderr == ""
    assert "Step" in (work / "r.log").read_text()  # the log file still gets the table
    res = cli("-q", "run", *RUN, "--trajectory", "t.h5")
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.startswith("mdband: error: trajectory file t.h5 exists")
    assert len(res.stderr.strip().splitlines()) == 1


def test_verbose_and_quiet_exclude_each_other(work):
    res = cli("-v", "-q", "run", *RUN)
    assert res.exit_code == 2 and res.stderr == "mdband: error: -v and -q exclude each other\n"


# ---------------------------------------------------------------------------- devices
def test_auto_is_cuda_when_available(monkeypatch):
    from mdband.potential import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    # "cuda" names the current GPU, so that device comparisons (cuda vs cuda:0) hold
    assert resolve_device("auto") == resolve_device(None) == torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_unknown_device_is_a_typed_error():
    from mdband.errors import MdbandError
    from mdband.potential import resolve_device

    with pytest.raises(MdbandError, match="unknown device 'gpu'; use auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def _default(fn, name="device"):
    return inspect.signature(fn).parameters[name].default


def test_every_front_end_defaults_to_auto():
    from mdband.calculator import Calculator
    from mdband.fit import FitConfig
    from mdband.md import RunConfig
    from mdband.md.relax import RelaxConfig
    from mdband.potential import Potential

    assert _default(mdband.load_model) == "auto"
    assert _default(Potential.__init__) == "auto"
    assert _default(Calculator.__init__) is None  # None: load_model's default
    assert FitConfig.__dataclass_fields__["device"].default == "auto"
    assert RunConfig.__dataclass_fields__["device"].default == "auto"
    assert RelaxConfig.__dataclass_fields__["device"].default == "auto"
    for name in main.list_commands(None):
        cmd = main.get_command(None, name)
        for param in cmd.params:
            if param.name == "device":
                # an explicit "auto", or unset: the config's default (auto, checked above)
                assert param.default == "auto" or not isinstance(param.default, str), name


def test_calculator_and_info_follow_the_rule(work, monkeypatch):
    from mdband.calculator import Calculator
    from mdband.potential import resolve_device

    calc = Calculator(str(work / "lj.mdband"))
    assert calc.potential.device == resolve_device("auto")
    res = cli("info", "lj.mdband", "--json")
    assert res.exit_code == 0, res.output
    assert f'"device": "{resolve_device("auto")}"' in res.stdout
