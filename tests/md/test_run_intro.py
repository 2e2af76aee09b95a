"""The run header names the device and, on CUDA, whether evaluations replay CUDA graphs."""

from types import SimpleNamespace

import torch

from mdband.md.runner import _Run


def intro(device: str, skin: float = 0.0, settings=None) -> list[str]:
    run = object.__new__(_Run)
    run.c = SimpleNamespace(ensemble="nve", timestep=1.0, steps=10, trajectory=None,
                            checkpoint=None, log=None, skin=skin)  # fmt: skip
    backend = "cell_list" if device == "cuda" else "vesin"
    pot = SimpleNamespace(kind="sezm", model_hash="ab" * 32, device=torch.device(device),
                          dtype=torch.float32, cuda_graphs="on",
                          neighbour_backend=backend, memory_budget="8 GB (8gb)",
                          host_memory="auto: freed memory kept", settings=settings)  # fmt: skip
    run.p = SimpleNamespace(potential=pot, start_step=0, notes=[])
    run.atoms = [0] * 4
    return run._intro()


def test_intro_reports_cuda_graphs_on_cuda_only():
    assert intro("cuda")[1] == "Model: sezm abababababab on cuda (float32), CUDA graphs on"
    assert intro("cpu")[1] == "Model: sezm abababababab on cpu (float32)"


def test_intro_names_the_neighbour_list():
    assert intro("cuda", 1.0)[2] == "Neighbours: cell list on the device, skin 1 Å"
    assert intro("cpu")[2] == "Neighbours: vesin on the CPU, rebuilt every step (skin 0)"


def test_intro_reports_the_memory_budget():
    assert intro("cpu")[3] == "Memory budget: 8 GB (8gb)"


def test_intro_reports_host_memory_on_cpu_only():
    assert intro("cpu")[4] == "Host memory: auto: freed memory kept"
    assert not any(line.startswith("Host memory:") for line in intro("cuda"))


def test_intro_reports_precision_and_compile_on_cuda():
    from mdband.settings import EngineSettings

    s = EngineSettings.resolve(stack_precision="fp16x3", compile="on")
    assert intro("cuda", settings=s)[4] == "Engine: SO(2) products fp16x3, torch.compile on"
    assert not any(line.startswith("Engine:") for line in intro("cpu", settings=s))


def test_compile_auto_only_for_long_cuda_runs(monkeypatch):
    from mdband.md.config import COMPILE_AUTO_STEPS, RunConfig
    from mdband.md.setup import compile_for, model_options

    monkeypatch.delenv("MDBAND_COMPILE", raising=False)

    def cfg(**kw):
        return RunConfig(structure="s.xyz", model="m.mdband", **kw)

    assert compile_for(cfg(device="cuda", steps=COMPILE_AUTO_STEPS)) == "on"
    assert compile_for(cfg(device="cuda:1", steps=COMPILE_AUTO_STEPS - 1)) == "off"
    assert compile_for(cfg(device="cpu", steps=10**6)) == "off"
    assert compile_for(cfg(device="cpu", steps=10, compile="on")) == "on"
    assert compile_for(cfg(device="cuda", steps=10**6, compile="off")) == "off"
    auto = compile_for(cfg(device="auto", steps=10**6))
    assert auto == ("on" if torch.cuda.is_available() else "off")
    opts = model_options(cfg(device="cpu", stack_precision="fp16x3"))
    assert opts["stack_precision"] == "fp16x3" and opts["compile"] == "off"
    # a resumed run counts the steps still to go
    long = cfg(device="cuda", steps=COMPILE_AUTO_STEPS + 10)
    assert compile_for(long, start=5) == "on" and compile_for(long, start=20) == "off"
    assert model_options(long, 20)["compile"] == "off"
    # auto leaves the choice to $MDBAND_COMPILE when set; on/off on the command line win
    monkeypatch.setenv("MDBAND_COMPILE", "on")
    assert compile_for(cfg(device="cpu", steps=10)) is None
    assert compile_for(cfg(device="cpu", steps=10, compile="off")) == "off"


def test_memory_budget_of_a_run(tmp_path, monkeypatch):
    """--memory-budget reaches the model (the header names it; a small one chunks the
    evaluation with the same numbers); a bad size is a one-line error, exit code 2."""
    import ase.io
    import numpy as np
    from ase.build import bulk
    from click.testing import CliRunner

    import mdband
    from mdband.cli import main
    from mdband.md.config import RunConfig
    from mdband.md.setup import model_options

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MDBAND_MEMORY_BUDGET", raising=False)
    assert "memory_budget" not in model_options(RunConfig(structure="s.xyz", model="m.mdband"))
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat(3)
    atoms.symbols[::4] = "Ni"
    ase.io.write("cuni.xyz", atoms)
    base = ["run", "--structure", "cuni.xyz", "--model", "builtin:emt-cuni", "--steps", "2",
            "--device", "cpu", "--dtype", "float64", "--no-progress",
            "--ensemble", "nve"]  # fmt: skip
    logs = {}
    for budget in ("off", "5MB"):
        res = CliRunner().invoke(main, [*base, "--memory-budget", budget, "--log", f"{budget}.csv"])
        assert res.exit_code == 0, res.output
        want = "Memory budget: 5 MB (5mb)" if budget == "5MB" else "Memory budget: off"
        assert want in res.output
        logs[budget] = np.genfromtxt(f"{budget}.csv", delimiter=",", names=True)
    pot = mdband.load_model("builtin:emt-cuni", device="cpu", memory_budget="5MB")
    assert pot.evaluate(atoms.positions, atoms.cell.array, True, list(atoms.symbols)).chunks > 1
    for name in logs["off"].dtype.names:  # chunked: the same thermo rows to rounding
        np.testing.assert_allclose(logs["5MB"][name], logs["off"][name], rtol=1e-10, atol=1e-12)
    bad = CliRunner().invoke(main, [*base, "--memory-budget", "5XB"])
    assert bad.exit_code == 2
    assert bad.stderr.strip().count("\n") == 0 and "memory_budget" in bad.stderr
