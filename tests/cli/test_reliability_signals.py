"""Clean exits on every signal (issue 40), one test per case:

* SIGTERM or SIGINT at any moment of the start-up (while Python imports torch, or with the
  outputs locked while the model loads): exit code 130, one line, no traceback, no lock or
  temporary file left (the ``mdband`` console script, ``mdband_launcher``, in child
  processes: the signal is real);
* every command (repair, export, plot, model-devi, convert, info, fit, relax) stopped by a
  signal: exit code 130 and one line (not click's "Aborted!" and exit code 1);
* signals repeated while a stopped run writes its checkpoint and final structure: both are
  written (no temporary file left, no checkpoint behind the trajectory), exit code 130.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import test_run
import torch
from click.testing import CliRunner
from test_run import snapshot

from mdband.cli import main
from mdband.io.checkpoint import read_checkpoint
from mdband.io.h5md import H5MDReader

work = test_run.work  # test_run's fixture: an argon run directory (ar.xyz, lj.mdband, run.toml)
BASE = ("--config", "run.toml", "--trajectory", "t.h5", "--checkpoint", "c.ckpt")
LAUNCH = "import sys; from mdband_launcher import main; sys.exit(main())"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _left_behind(directory):
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def _child(work, *args, env=None):
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCH, *map(str, args)],
        cwd=work,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_signal_while_python_starts_is_one_line_and_exit_130(work):
    child = _child(work, "run", *BASE, "--steps", 10**6)
    time.sleep(0.5)  # importing mdband (torch) takes seconds: the signal arrives in an import
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=300)
    assert child.returncode == 130, (child.returncode, err[-3000:])
    lines = err.splitlines()  # the start-up's line, or the run's where it had started
    assert len(lines) == 1 and lines[0].startswith("mdband: error: stopped by SIGINT"), err
    assert "nothing was written" in lines[0] or "at step 0" in lines[0]
    assert _left_behind(work) == []  # no lock, no temporary file


_SLOW_KIND = textwrap.dedent(
    """
    import os, time
    from mdband.kinds import register_kind
    from mdband.testing.lj import LennardJones

    @register_kind("slow")
    def build(config, state_dict, options):
        open(os.environ["SLOW_READY"], "w").close()  # the outputs are locked by now
        time.sleep(120)
        return LennardJones(config["epsilon"], config["sigma"], config["cutoff"], config["r_on"])
    """
)


def test_a_signal_while_the_model_loads_releases_the_locks(work, tmp_path_factory):
    """The run has locked its outputs and is loading the model when the signal comes."""
    plugins = tmp_path_factory.mktemp("plugins")
    (plugins / "slowkind.py").write_text(_SLOW_KIND)
    obj = torch.load(work / "lj.mdband", weights_only=True)
    obj["kind"] = "slow"
    obj.pop("checksum", None)
    torch.save(obj, work / "slow.mdband")
    ready = plugins / "ready"
    env = {
        "MDBAND_PLUGINS": ",".join(filter(None, [os.environ.get("MDBAND_PLUGINS"), "slowkind"])),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")])),
        "SLOW_READY": str(ready),
    }
    before = snapshot(work)
    child = _child(work, "run", *BASE, "--model", "slow.mdband", "--log", "r.csv", env=env)
    deadline = time.monotonic() + 240
    while not ready.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), child.communicate()[1][-3000:]
    assert ".t.h5.lock" in _left_behind(work)  # held while the model loads
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 130, (child.returncode, err[-3000:])
    assert err.splitlines() == [
        "mdband: error: stopped by SIGTERM; the run had not started: nothing was written"
    ]
    assert _left_behind(work) == [] and snapshot(work) == before


# command -> (args, module attribute that the signal interrupts)
COMMANDS = {
    "repair": (["repair", "t.h5"], "mdband.io.repair.inspect_trajectory"),
    "export": (["export", "t.h5", "out.xyz"], "mdband.io.h5md_reader.H5MDReader.to_atoms"),
    "plot": (["plot", "t.h5", "-o", "t.png"], "mdband.io.plot.plot_thermo"),
    "model-devi": (
        ["model-devi", "lj.mdband", "lj.mdband", "-s", "ar.xyz"],
        "mdband.loader.read_torch_file",
    ),
    "convert": (["convert", "lj.mdband", "copy.mdband"], "mdband.loader.read_torch_file"),
    "info": (["info", "lj.mdband"], "mdband.loader.read_torch_file"),
    "relax": (
        ["relax", "--structure", "ar.xyz", "--model", "lj.mdband", "--output", "o.xyz"],
        "mdband.loader.read_torch_file",
    ),
    "fit": (["fit", "ar.xyz", "-o", "m.mdband", "--log", "f.log"], "mdband.fit.train.read_dataset"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_stopped_by_a_signal_is_one_line_and_exit_130(work, monkeypatch, command):
    assert cli("run", *BASE, "--steps", 10).exit_code == 0
    args, where = COMMANDS[command]

    def stop(*a, **kw):
        raise KeyboardInterrupt("SIGTERM")  # what the console script makes of a SIGTERM

    monkeypatch.setattr(where, stop)
    before = snapshot(work)
    res = cli(*args)
    assert res.exit_code == 130, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM" in lines[0], res.stderr
    assert "Aborted" not in res.output and "Traceback" not in res.output
    assert _left_behind(work) == [] and snapshot(work) == before


def test_repeated_signals_while_a_stopped_run_writes_complete_the_writes(work, monkeypatch):
    import mdband.md.runner as runner

    advance, write_ck, write_final = (
        runner._Run._advance,
        runner.write_checkpoint,
        runner.write_final,
    )

    def advance_then_stop(self, step):
        advance(self, step)
        if step == 25:
            os.kill(os.getpid(), signal.SIGTERM)  # stop the run after this step

    def interrupted(write):
        def wrapper(path, *args):
            if getattr(args[0], "step", 25) == 25:  # the writes after the stop
                os.kill(os.getpid(), signal.SIGINT)  # a second (and third) signal meanwhile
                os.kill(os.getpid(), signal.SIGTERM)
            return write(path, *args)

        return wrapper

    monkeypatch.setattr(runner._Run, "_advance", advance_then_stop)
    monkeypatch.setattr(runner, "write_checkpoint", interrupted(write_ck))
    monkeypatch.setattr(runner, "write_final", interrupted(write_final))
    res = cli("run", *BASE, "--steps", 40)
    assert res.exit_code == 130, res.output
    assert "stopped by SIGTERM at step 25; resume with --resume from c.ckpt" in res.stderr
    assert read_checkpoint(work / "c.ckpt").step == 25
    with H5MDReader(work / "t.h5") as r:
        assert list(r.steps) == [0, 10, 20]  # the trajectory does not run ahead of it
    assert (work / "t.final.xyz").is_file() and _left_behind(work) == []
