"""The README's main command works verbatim (with fewer steps, in a copy of the example)."""

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_main_command(tmp_path):
    text = (REPO / "README.md").read_text()
    first = text.split("```bash\n", 1)[1].splitlines()[0]
    assert first.startswith("make install && cd examples/builtin-emt && ")
    work = tmp_path / "examples" / "builtin-emt"
    shutil.copytree(REPO / "examples" / "builtin-emt", work)
    bindir = Path(sys.executable).parent
    for part in first.split(" && ")[2:]:
        argv = shlex.split(part)
        argv[0] = str(bindir / Path(argv[0]).name)
        if argv[0].endswith("python"):
            argv = [sys.executable, *argv[1:], "--reps", "4"]
        else:
            argv += ["--steps", "4", "--no-progress", "--threads", "1"]
        proc = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert (work / "cuni.h5").is_file()
    assert "Epot" in proc.stdout + proc.stderr


def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    """Every ``python`` block of the README, in order, in one namespace, in an empty folder."""
    import re

    import torch

    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)
    assert blocks, "the README has a Python example"
    monkeypatch.chdir(tmp_path)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        namespace = {"__name__": "__main__"}
        for k, body in enumerate(blocks):
            exec(compile(body, f"README.md (python block {k + 1})", "exec"), namespace)
    finally:
        torch.set_num_threads(old)
    res = namespace["res"]
    assert res.forces.shape == (32, 3) and (tmp_path / "model.mdband").is_file()
