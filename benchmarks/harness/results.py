"""Results as JSON lines: one object per measurement, printed and appended to a file.

A :class:`Results` of one run of a benchmark stamps every record with the benchmark's name
(``bench``), the run's id (``run``: UTC time and process id, so that runs appended to one file
stay apart) and what the record holds (``kind``). Its first record, kind ``start``, describes
the run: command line, settings, host, Python, torch and GPU, the repository's commit. Each
record is one line written with one call and flushed, to standard output (``echo``) and, in
append mode, to ``path``: a file is never overwritten, and a run that stops leaves whole lines.
:func:`read` reads such a file back.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _plain(value):
    """JSON for what ``json`` does not know: numpy scalars and arrays, paths, devices, dtypes."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (Path, set, frozenset)):
        return sorted(value) if isinstance(value, (set, frozenset)) else str(value)
    return str(value)


def _commit() -> str | None:
    """The repository's commit (None outside a git checkout, as on the device machine)."""
    try:
        p = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.strip() or None


def environment() -> dict:
    """What ran the benchmark: host, Python, torch and its GPU (when this process has already
    imported torch: the harness does not load it for that), the commit, the load average."""
    env = {
        "utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "commit": _commit(),
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name()
    return env


class Results:
    """The records of one benchmark run (see the module docstring).

    Parameters
    ----------
    bench : str
        The benchmark's name (its module under ``benchmarks``).
    path : str or Path or None
        The JSON-lines file the records are appended to (None: standard output only).
    settings : dict, optional
        The run's settings (e.g. ``vars(args)``), recorded in the ``start`` record.
    echo : bool
        Print every record on standard output.
    """

    def __init__(self, bench: str, path=None, settings: dict | None = None, echo: bool = True):
        self.bench = bench
        self.path = None if path is None else Path(path)
        self.echo = echo
        self.run = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}"
        self.records: list[dict] = []
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.add("start", argv=sys.argv[1:], settings=dict(settings or {}), **environment())

    def add(self, kind: str, **fields) -> dict:
        """Record ``fields`` as one ``kind`` record; the record (as read back from JSON)."""
        record = {"bench": self.bench, "run": self.run, "kind": kind, **fields}
        line = json.dumps(record, default=_plain)
        if self.echo:
            print(line, flush=True)
        if self.path is not None:
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
        record = json.loads(line)
        self.records.append(record)
        return record

    def of(self, kind: str) -> list[dict]:
        """This run's records of ``kind``."""
        return [r for r in self.records if r["kind"] == kind]


def read(path, kind: str | None = None, bench: str | None = None) -> list[dict]:
    """The records of the JSON-lines file ``path`` (those of ``kind`` and ``bench`` if given);
    a last line without its newline (a writer stopped mid-line) is left out."""
    text = Path(path).read_text()
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]
    out = [json.loads(line) for line in lines if line.strip()]
    return [
        r
        for r in out
        if (kind is None or r.get("kind") == kind) and (bench is None or r.get("bench") == bench)
    ]
