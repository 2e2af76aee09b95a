"""benchmarks/harness: the timer counts and clocks what it claims, the systems and models are
what the scripts compared before, the flags mean one thing everywhere, results are JSON lines
appended and read back, and ``mdband run``'s summary is read as the runner writes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from benchmarks import harness
from benchmarks.harness import commands, flags, models, results, systems, timer


# ------------------------------------------------------------------ timer
def test_measure_calls_warmup_then_repeat_and_times_each():
    calls = []
    t = harness.measure(lambda: calls.append(1), "cpu", repeat=4, warmup=3)
    assert len(calls) == 7 and len(t.wall) == len(t.cpu) == 4 and t.device is None
    assert all(w >= 0 for w in t.wall) and t.ms == t.median("wall")
    assert t.kernel_ms == t.ms  # no device clock on a CPU: the wall clock
    d = t.as_dict("call_")
    assert set(d) == {"call_ms", "call_min_ms", "call_cpu_ms", "call_calls"}
    assert d["call_calls"] == 4


def test_cpu_clock_counts_a_waited_for_child():
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    value, t = harness.once(lambda: subprocess.run([sys.executable, "-c", burn]).returncode)
    assert value == 0 and len(t.wall) == 1
    assert t.median("cpu") >= 250  # the child's 0.3 s of CPU, in ms


@pytest.mark.parametrize(("q", "want"), [(0.0, 1.0), (0.5, 2.5), (0.2, 1.6), (1.0, 4.0)])
def test_timing_statistics(q, want):
    t = timer.Timing(wall=(4.0, 1.0, 3.0, 2.0), cpu=(1.0,) * 4, device=(0.5, 0.5, 0.7, 0.5))
    assert t.quantile(q) == pytest.approx(want)
    assert t.median() == 2.5 and t.min() == 1.0 and t.kernel_ms == 0.5
    assert t.as_dict()["device_ms"] == 0.5


def test_timer_refuses_what_it_cannot_time():
    with pytest.raises(ValueError, match="repeat"):
        harness.measure(lambda: None, "cpu", repeat=0)
    with pytest.raises(ValueError, match="mps"):
        timer.timer("mps")
    with pytest.raises(ValueError, match="not a CUDA device"):
        timer.CudaTimer("cpu")
    with pytest.raises(ValueError, match="device times"):
        timer.Timing(wall=(1.0,), cpu=(1.0,)).median("device")
    with pytest.raises(ValueError, match="clock"):
        timer.Timing(wall=(1.0,), cpu=(1.0,)).median("gpu")


def test_peak_memory_on_a_cpu_is_none():
    with harness.PeakMemory("cpu") as mem:
        np.ones(10)
    assert mem.peak_gb is None and mem.added_mb is None


# ------------------------------------------------------------------ systems
def test_diamond_is_rattled_the_same_way_every_time():
    a, b = systems.diamond(2), systems.diamond(2)
    assert len(a) == 64 and a.get_chemical_symbols() == ["C"] * 64
    assert np.array_equal(a.positions, b.positions)
    assert np.allclose(a.cell.array, np.eye(3) * 2 * systems.DIAMOND_A)
    ideal = systems.diamond(2, rattle=0.0)
    moved = np.abs(a.positions - ideal.positions)
    assert 0 < moved.max() < 0.2 and not np.array_equal(
        a.positions, systems.diamond(2, 1).positions
    )
    pos, cell, pbc, species = systems.evaluate_args(a)
    assert pbc is True and species == a.get_chemical_symbols() and pos is a.positions


def test_moved_copies_leave_the_original():
    base = systems.diamond(1)
    before = base.positions.copy()
    frames = systems.moved_copies(base, 3, scale=0.01, seed=4)
    assert np.array_equal(base.positions, before) and len(frames) == 3
    steps = [np.abs(f.positions - before).max() for f in frames]
    assert all(0 < s < 0.1 for s in steps)
    assert not np.array_equal(frames[0].positions, frames[1].positions)


def test_water_frames_are_water_of_the_sizes_asked_for(tmp_path):
    from ase.geometry import get_distances

    from mdband.io.systems import read_systems

    frames = systems.water_frames(12, 9, 63)
    sizes = [len(s) for _, _, s in frames]
    assert min(sizes) >= 9 and max(sizes) <= 63 and all(n % 3 == 0 for n in sizes)
    for pos, cell, species in frames:
        assert species[:3] == ["O", "H", "H"]
        volume = np.linalg.det(cell)
        assert 25 < volume / (len(species) // 3) < 35  # about 1 g/cm3
        d = get_distances(pos, cell=cell, pbc=True)[1]
        assert d[np.triu_indices(len(pos), 1)].min() > 0.9  # O-H bonds 0.957 A, others >= 1.6
    dirs = systems.write_npy_systems(frames, tmp_path, ["O", "H"])
    back = [f for d in dirs for f in read_systems(d)]
    assert sorted(f.n_atoms for f in back) == sorted(sizes)
    pos, cell, species = systems.npy_frame(dirs[0])
    first = next(f for f in frames if len(f[2]) == len(species))
    assert np.allclose(pos, first[0]) and np.allclose(cell, first[1]) and species == first[2]


def test_argon_is_wrapped_into_its_cell():
    a = systems.argon(2, seed=3)
    length = a.cell.array.diagonal()
    assert len(a) == 32 and np.allclose(length, 2 * 5.26)
    assert (a.positions >= 0).all() and (a.positions < length).all()


# ------------------------------------------------------------------ models
def test_configs_and_weights():
    from mdband.config import SeZMConfig
    from mdband.testing.sezm import random_potential

    default, mini, tiny = (models.config(n) for n in ("default", "mini", "tiny"))
    assert default == SeZMConfig(type_map=("C",)).to_dict()
    assert (mini["channels"], mini["l_schedule"], mini["type_map"]) == (32, [2, 2], ["C"])
    assert tiny["channels"] == 8 and tiny["rcut"] == 3.0
    with pytest.raises(ValueError, match="huge"):
        models.config("huge")
    # the harness's random potential is the one the scripts built before (random_potential)
    ours = models.potential(tiny, seed=3, gain=0.5, dtype="float64")
    theirs = random_potential(tiny, seed=3, gain=0.5)
    args = systems.evaluate_args(systems.diamond(1))
    assert ours.evaluate(*args).energy == theirs.evaluate(*args).energy
    w = models.random_weights(tiny, seed=3)
    assert all(np.array_equal(w[k], v) for k, v in models.random_weights(tiny, seed=3).items())


def test_mini_section_must_match_the_shipped_input(tmp_path):
    path = tmp_path / "input-mini.json"
    section = dict(models.DEEPMD_MINI, type_map=["O", "H"])
    path.write_text(json.dumps({"model": section}))
    assert models.deepmd_sections(["mini"], path)["mini"] == models.DEEPMD_MINI
    section["descriptor"] = dict(section["descriptor"], channels=64)
    path.write_text(json.dumps({"model": section}))
    with pytest.raises(SystemExit, match="differs"):
        models.deepmd_sections(["mini"], path)
    with pytest.raises(ValueError, match="unknown"):
        models.deepmd_sections(["water"])


# ------------------------------------------------------------------ flags
def test_shared_flags_offer_only_what_a_script_asks_for(monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    ap = flags.parser("demo", "Demo.\n\nMore.", device="cpu", repeat=3, sizes=[4, 8], threads=[1])
    args = ap.parse_args([])
    assert vars(args) == {
        "device": "cpu",
        "repeat": 3,
        "sizes": [4, 8],
        "threads": [1],
        "out": None,
    }
    args = ap.parse_args(["--device", "cuda:1", "--sizes", "--threads", "1", "2", "--out", "x"])
    assert (args.device, args.sizes, args.threads, args.out) == ("cuda:1", [], [1, 2], "x")
    for bad in (["--device", "gpu"], ["--repeat", "0"], ["--dtype", "float32"]):
        with pytest.raises(SystemExit):
            ap.parse_args(bad)
    with pytest.raises(ValueError, match="no shared flag"):
        flags.parser("demo", None, colour="red")


def test_device_auto_and_the_out_default(monkeypatch):
    import torch

    monkeypatch.setenv("OUT", "/device/out")
    ap = flags.parser("experiments.demo", None, device="auto", warmup=0, tiny=False)
    args = ap.parse_args([])
    assert args.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert args.out == "/device/out/demo.jsonl" and args.warmup == 0 and args.tiny is False
    assert "--out" not in flags.shared("demo", out=False, repeat=1).format_help()


# ------------------------------------------------------------------ results
def test_records_are_appended_and_read_back(tmp_path, capsys):
    path = tmp_path / "sub" / "r.jsonl"
    first = results.Results("demo", path, {"repeat": 2, "where": tmp_path})
    rec = first.add("row", value=np.float32(1.5), sizes=np.arange(2), atoms=np.int64(8))
    assert rec == {
        "bench": "demo",
        "run": first.run,
        "kind": "row",
        "value": 1.5,
        "sizes": [0, 1],
        "atoms": 8,
    }
    second = results.Results("other", path, echo=False)
    second.add("row", value=2)
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line) for line in lines)  # appended, not replaced
    start = results.read(path, kind="start", bench="demo")[0]
    assert start["settings"] == {"repeat": 2, "where": str(tmp_path)} and "utc" in start
    assert [r["value"] for r in results.read(path, kind="row")] == [1.5, 2]
    assert first.of("row") == [rec]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and json.loads(printed[1]) == rec  # the second run did not echo
    with open(path, "a") as fh:
        fh.write('{"bench": "demo", "kind": "row", "val')  # a writer stopped mid-line
    assert len(results.read(path)) == 4


# ------------------------------------------------------------------ commands
def test_run_summary_reads_the_runners_own_lines():
    from mdband.md.runner import steady_split, time_split

    text = (
        f"Finished at step 200 (0.2 ps): 200 steps in 4.00 s, 1,250.0 steps/s, 1 ns/day\n"
        f"{time_split(4.0, 3.0, 200)}{steady_split(1.9, 1.5, 190)}\n"
    )
    got = commands.run_summary(text)
    assert got == pytest.approx(
        {
            "step_ms": 20.0,
            "model_ms": 15.0,
            "steady_step_ms": 10.0,
            "steady_model_ms": 7.89,
            "steps_per_s": 1250.0,
            "ms_per_step": 0.8,
        },
        rel=1e-3,
    )
    assert commands.run_summary("no summary") == {}


def test_module_commands_import_this_checkout_anywhere(tmp_path):
    cmd = commands.module("vs_deepmd", "checkpoints", tmp_path)
    assert cmd == [sys.executable, "-m", "benchmarks.vs_deepmd", "checkpoints", str(tmp_path)]
    env = commands.environment({"X_TEST": "1"})
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(commands.ROOT) and env["X_TEST"] == "1"
    probe = "import benchmarks.harness, sys; print(benchmarks.harness.__file__)"
    p = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert p.stdout.startswith(str(commands.ROOT))
