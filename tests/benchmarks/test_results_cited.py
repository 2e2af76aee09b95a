"""Only the raw results the records cite stay in git: every file under ``benchmarks/results``
is cited by BENCHMARKS.md, the README or a page of docs/, and every citation names files that
exist.

A citation is ``results/NAME`` with ``{a,b}`` alternatives (which may run over lines) and ``*``
wildcards (``.*``: any extension), in any case; within a dated section a file may also be named
by what follows its date and machine (``-kernels-7.json`` after ``results/2026-11-30-h200-…``).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DATED = re.compile(r"^(\d{4}-\d{2}-\d{2}-[a-z0-9]+)-(.+)$")


def records() -> str:
    pages = [REPO / "BENCHMARKS.md", REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return "\n".join(p.read_text() for p in pages if p.is_file())


def expand(pattern: str) -> list[str]:
    """``pattern`` with each ``{a,b,...}`` group expanded (blanks inside a group dropped)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    out = []
    for alt in m.group(1).split(","):
        out += expand(pattern[: m.start()] + re.sub(r"\s+", "", alt) + pattern[m.end() :])
    return out


def citations(text: str) -> list[str]:
    """Every ``results/...`` pattern of ``text``, braces expanded."""
    out, lower, i = [], text.lower(), 0
    while (i := lower.find("results/", i)) >= 0:
        j, depth, buf = i + len("results/"), 0, ""
        while j < len(text):
            ch = text[j]
            depth += (ch == "{") - (ch == "}")
            if depth == 0 and ch in " `),;:\n":
                break
            buf += "" if ch == "\n" else ch
            j += 1
        out += [p for p in expand(buf.rstrip(".")) if p]
        i = j
    return out


def test_expand_and_citations_read_the_forms_in_use():
    text = "raw `results/2026-12-03-h200-{a,\nb-2}.*`, results/X-model-3*.json and Results/y.log."
    want = ["2026-12-03-h200-a.*", "2026-12-03-h200-b-2.*", "X-model-3*.json", "y.log"]
    assert citations(text) == want


def test_every_result_file_is_cited_and_every_citation_exists():
    files = sorted(p.name for p in RESULTS.iterdir() if p.is_file())
    text = records()
    patterns = citations(text)
    missing = [p for p in patterns if not fnmatch.filter(files, p)]
    assert not missing, f"cited but not in benchmarks/results: {missing}"
    cited = {f for p in patterns for f in fnmatch.filter(files, p)}
    for f in set(files) - cited:  # a shorthand: the name after the date and machine
        m = DATED.match(f)
        if m and re.search(r"(?<![\w/.-])-?" + re.escape(m.group(2)) + r"(?![\w.-])", text):
            cited.add(f)
    assert not set(files) - cited, f"in git but cited nowhere: {sorted(set(files) - cited)}"
