"""Licence files, typing marker and changelog ship as pyproject.toml declares them."""

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def test_licence_texts_match_the_declared_licence():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "LGPL-3.0-or-later"
    assert meta["license-files"] == ["LICENSE", "COPYING"]
    lgpl = (REPO / "LICENSE").read_text()
    gpl = (REPO / "COPYING").read_text()
    assert lgpl.split()[:7] == "GNU LESSER GENERAL PUBLIC LICENSE Version 3,".split()
    assert gpl.split()[:6] == "GNU GENERAL PUBLIC LICENSE Version 3,".split()
    # the LGPL v3 is additional permissions on top of the GPL v3: both texts, in full
    assert "incorporates the terms and conditions of version 3 of the GNU" in " ".join(lgpl.split())
    assert "END OF TERMS AND CONDITIONS" in gpl and len(gpl.splitlines()) > 600


def test_typed_marker_and_changelog():
    assert (REPO / "mdband" / "py.typed").is_file()
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setup["package-data"]["mdband"]
    assert "mdband_ase_plugin" in setup["py-modules"]
    changelog = (REPO / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog") and "## [Unreleased]" in changelog
