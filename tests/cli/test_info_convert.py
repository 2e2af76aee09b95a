"""``mdband info`` and ``mdband convert``: output, exit codes, no overwrite."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from mdband.cli import main

REPO = Path(__file__).resolve().parents[2]
WATER = REPO.parent / "shared" / "data" / "dpa4-water-smoke" / "pretrained.pt"
needs_shared = pytest.mark.skipif(not WATER.exists(), reason="../shared (water checkpoint) absent")


@needs_shared
def test_info_reports_layout_and_config():
    res = CliRunner().invoke(main, ["info", str(WATER)])
    assert res.exit_code == 0, res.output
    assert "type map         O H" in res.output
    assert "rotation layout  band" in res.output
    assert "MDBAND_ROTATION_LAYOUT" in res.output
    assert "cuda_graphs=auto ($MDBAND_CUDA_GRAPHS)" in res.output
    assert "cuda graphs      off (not on CUDA)" in res.output
    res = CliRunner().invoke(main, ["info", str(WATER), "--json", "--rotation-layout", "dense"])
    info = json.loads(res.output)
    assert info["rotation_layout"] == "dense" and info["rotation_layout_requested"] == "dense"
    assert info["parameters"] > 1000


@needs_shared
def test_info_env_override(monkeypatch):
    monkeypatch.setenv("MDBAND_ROTATION_LAYOUT", "dense")
    info = json.loads(CliRunner().invoke(main, ["info", str(WATER), "--json"]).output)
    assert info["rotation_layout"] == "dense"
    monkeypatch.setenv("MDBAND_ROTATION_LAYOUT", "sideways")
    res = CliRunner().invoke(main, ["info", str(WATER)])
    assert res.exit_code == 2 and "MDBAND_ROTATION_LAYOUT" in res.output


@needs_shared
def test_convert_writes_and_refuses_overwrite(tmp_path):
    out = tmp_path / "water.mdband"
    res = CliRunner().invoke(main, ["convert", str(WATER), str(out)])
    assert res.exit_code == 0, res.output
    before = out.read_bytes()
    res = CliRunner().invoke(main, ["convert", str(WATER), str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    assert out.read_bytes() == before
    info = json.loads(CliRunner().invoke(main, ["info", str(out), "--json"]).output)
    assert info["metadata"]["source"] == "deepmd-kit"


def test_bad_model_file_is_one_line_exit_2(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_text("not a model")
    proc = subprocess.run(
        [sys.executable, "-m", "mdband.cli", "info", str(junk)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "corrupt" in lines[0] and "Traceback" not in proc.stderr


def test_info_prints_the_memory_budget(monkeypatch):
    fixture = REPO / "tests" / "fixtures" / "deepmd" / "s2ffn.pt"
    monkeypatch.delenv("MDBAND_MEMORY_BUDGET", raising=False)
    res = CliRunner().invoke(main, ["info", str(fixture)])
    assert res.exit_code == 0, res.output
    assert "memory budget    auto: no limit on CPU" in res.output
    assert "memory_budget=auto ($MDBAND_MEMORY_BUDGET)" in res.output
    monkeypatch.setenv("MDBAND_MEMORY_BUDGET", "8GB")
    info = json.loads(CliRunner().invoke(main, ["info", str(fixture), "--json"]).output)
    assert info["memory_budget"] == "8 GB (8gb)" and info["settings"]["memory_budget"] == "8gb"
    monkeypatch.setenv("MDBAND_MEMORY_BUDGET", "lots")
    res = CliRunner().invoke(main, ["info", str(fixture)])
    assert res.exit_code == 2 and "MDBAND_MEMORY_BUDGET" in res.output


@pytest.mark.parametrize("mode", ["tf32x3", "fp16x3", "fp16", "ieee"])
def test_info_states_the_precision_modes_measured_error(monkeypatch, mode):
    from mdband.settings import PRECISION_ACCURACY

    fixture = REPO / "tests" / "fixtures" / "deepmd" / "s2ffn.pt"
    monkeypatch.setenv("MDBAND_STACK_PRECISION", mode)
    res = CliRunner().invoke(main, ["info", str(fixture)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if x.startswith("SO(2) products"))
    assert line.startswith(f"SO(2) products   {mode} ($MDBAND_STACK_PRECISION): ")
    assert PRECISION_ACCURACY[mode] in line
    info = json.loads(CliRunner().invoke(main, ["info", str(fixture), "--json"]).output)
    assert info["stack_precision_accuracy"] == PRECISION_ACCURACY[mode]


FIX = REPO / "tests" / "fixtures" / "deepmd"


def _edited_checkpoint(tmp_path, edit):
    import copy

    import torch

    sd = dict(torch.load(FIX / "s2ffn.pt", weights_only=True)["model"])
    sd["_extra_state"] = copy.deepcopy(sd["_extra_state"])
    edit(sd, sd["_extra_state"]["model_params"])
    path = tmp_path / "edited.pt"
    torch.save({"model": sd}, path)
    return path


def _set_desc(key, value):
    def edit(sd, params):
        params["descriptor"][key] = value

    return edit


def _weight_to_str(sd, params):
    key = next(k for k in sd if k.endswith("radial_embedding.net.0.matrix") or "weight" in k)
    sd[key] = "not a tensor"


def _weight_shape(sd, params):
    key = next(k for k in sd if k.endswith("type_embedding.adam_type_embedding") or "weight" in k)
    sd[key] = sd[key][..., :1].clone()


def _version_none(sd, params):
    sd["model.Default.atomic_model.descriptor.version_tensor"] = [1, 2]  # float(): TypeError


@pytest.mark.parametrize(
    "edit,words",
    [
        (_set_desc("env_exp", 5.5), ["env_exp=5.5"]),  # a bare TypeError before
        (_set_desc("edge_norm", [False, True]), ["edge_norm=[False, True]"]),
        (_set_desc("basis_type", "gaussian/fixed"), ["basis_type='gaussian/fixed'"]),
        # read; then the radial MLP's norm weights have no place
        (_set_desc("edge_norm", [False, True, True]), ["weights do not match"]),
        (_set_desc("sandwich_norm", True), ["sandwich_norm=True"]),
        (_weight_to_str, ["weights do not match"]),
        (_weight_shape, ["weights do not match", "size mismatch"]),
        (_version_none, ["edited.pt", "cannot build a model", "TypeError"]),
    ],
)
def test_info_on_a_model_it_cannot_load_is_one_line_exit_2(tmp_path, edit, words):
    """Whatever fails while a model is read and built: one line on stderr, exit 2."""
    res = CliRunner().invoke(main, ["info", str(_edited_checkpoint(tmp_path, edit))])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for word in words:
        assert word in lines[0], lines[0]
