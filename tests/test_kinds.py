"""Model kinds (:mod:`mdband.kinds`): mdband's own, entry points, MDBAND_PLUGINS, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from mdband import kinds
from mdband.errors import ModelFileError, PluginImportError, UnknownModelKindError
from mdband.testing.lj import lennard_jones_potential

TOY = """
import torch


class Toy(torch.nn.Module):
    rotation_layout = None

    def __init__(self, k):
        super().__init__()
        self.k = float(k)

    def forward(self, types, src, dst, edge_vec, exchange=None):
        r = torch.linalg.vector_norm(edge_vec, dim=-1)
        e = torch.zeros(types.shape[0], dtype=edge_vec.dtype, device=edge_vec.device)
        return e.index_add(0, dst, 0.5 * self.k * r**2)


def build(config, state_dict, options):
    return Toy(config["k"])
"""


@pytest.fixture
def toy_module(tmp_path, monkeypatch):
    """A module ``toy_kind_module`` on sys.path whose ``build`` builds a harmonic pair model."""
    (tmp_path / "toy_kind_module.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("toy_kind_module", None)


def test_unknown_kind_is_a_one_line_typed_error(monkeypatch):
    monkeypatch.delenv("MDBAND_PLUGINS", raising=False)
    with pytest.raises(UnknownModelKindError) as info:
        kinds.model_builder("no-such-kind")
    msg = str(info.value)
    assert isinstance(info.value, ModelFileError) and "\n" not in msg
    for part in ("'no-such-kind'", "sezm", "mdband.model_kinds", "MDBAND_PLUGINS"):
        assert part in msg


def test_product_kind_needs_no_registration_and_cannot_be_replaced():
    from mdband.model.factory import build_sezm

    assert kinds.model_builder("sezm") is build_sezm
    assert "sezm" in kinds.known_kinds()
    with pytest.raises(ValueError, match="mdband's own"):
        kinds.register_kind("sezm")


def test_registered_kind_is_found():
    assert "lj" in kinds.known_kinds()  # mdband.testing.lj was imported above
    pot = lennard_jones_potential()
    assert kinds.model_builder("lj")(pot.config, {}, {}).cutoff == pot.cutoff


def test_entry_point_of_an_installed_distribution(toy_module):
    """A distribution declaring ``[mdband.model_kinds] toy-ep = toy_kind_module:build``."""
    dist = toy_module / "toy_kind-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kind\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mdband.model_kinds]\ntoy-ep = toy_kind_module:build\n")
    assert "toy-ep" in kinds.known_kinds()
    model = kinds.model_builder("toy-ep")({"k": 3.0}, None, {})
    assert model.k == 3.0


def test_broken_entry_point_is_a_typed_error(tmp_path, monkeypatch):
    dist = tmp_path / "broken_kind-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-kind\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[mdband.model_kinds]\nbroken = no_such_mod:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginImportError, match="broken = 'no_such_mod:build'"):
        kinds.model_builder("broken")


def test_plugins_variable_imports_the_module_that_registers(toy_module, monkeypatch):
    (toy_module / "toy_plugin.py").write_text(
        "from mdband.kinds import register_kind\n"
        "from toy_kind_module import build\n"
        "register_kind('toy-plugin')(build)\n"
    )
    monkeypatch.setenv("MDBAND_PLUGINS", " toy_plugin , ")
    try:
        assert kinds.plugin_modules() == ["toy_plugin"]
        assert kinds.model_builder("toy-plugin")({"k": 1.5}, None, {}).k == 1.5
    finally:
        kinds._REGISTERED.pop("toy-plugin", None)
        sys.modules.pop("toy_plugin", None)


def test_bad_plugins_variable_is_a_typed_error(monkeypatch):
    monkeypatch.setenv("MDBAND_PLUGINS", "mdband.no_such_module")
    with pytest.raises(PluginImportError, match="MDBAND_PLUGINS names module 'mdband.no_such_"):
        kinds.model_builder("still-unknown")


def _child(code: str, plugins: str | None, cwd):
    env = {k: v for k, v in os.environ.items() if k != "MDBAND_PLUGINS"}
    if plugins is not None:
        env["MDBAND_PLUGINS"] = plugins
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )


def test_child_process_finds_test_kinds_only_through_the_setting(tmp_path):
    """A fresh process (as ``mdband run`` or LAMMPS start) loads product models without
    importing mdband.testing, refuses an lj file with the one-line hint, and loads it once
    ``MDBAND_PLUGINS`` names the module."""
    lennard_jones_potential().save(tmp_path / "lj.mdband")
    code = """
        import sys
        import mdband
        from mdband.cli import main
        mdband.load_model("builtin:emt-cuni")
        assert not [m for m in sys.modules if m.startswith("mdband.testing")], "testing imported"
        main(["info", "lj.mdband"])
    """
    bare = _child(code, None, tmp_path)
    assert bare.returncode == 2, bare.stderr
    lines = bare.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model kind 'lj'" in lines[0], bare.stderr
    assert "MDBAND_PLUGINS=mdband.testing.lj" in lines[0]
    ok = _child(code, "mdband.testing.lj", tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "lj" in ok.stdout
