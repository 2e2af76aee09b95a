"""Commit subjects stay at most 72 characters from the commit that adopted the rule on.

History before it is left as it was (rewriting published commits would break every clone):
every commit with a longer subject is an ancestor of one of ``ADOPTED`` (the last two, on two
branches merged since). Needs the git history: a checkout without
it (an sdist, a shallow clone that does not reach ``ADOPTED``) skips with the reason.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ADOPTED = ("b897d0e501c4058b815f7b2cd2ee45766f8d1bec", "825587f05c8fd170b2455b140a3172849ee852a9")
LIMIT = 72


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


def _subjects_since_adoption() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("no git history in this checkout")
    if any(_git("cat-file", "-e", f"{c}^{{commit}}").returncode != 0 for c in ADOPTED):
        pytest.skip("the history does not reach the commits that adopted the rule (shallow?)")
    log = _git("log", "--format=%H %s", "HEAD", "--not", *ADOPTED)
    assert log.returncode == 0, log.stderr
    return [line for line in log.stdout.splitlines() if line]


def test_commit_subjects_are_at_most_72_characters():
    long = [line for line in _subjects_since_adoption() if len(line.split(" ", 1)[1]) > LIMIT]
    assert not long, "commit subjects over 72 characters:\n" + "\n".join(long)


@pytest.mark.parametrize("commit", ADOPTED)
def test_the_rule_is_checked_on_a_subject_that_breaks_it(commit):
    _subjects_since_adoption()  # the same skips
    subject = _git("log", "-1", "--format=%s", commit).stdout.strip()
    assert len(subject) > LIMIT  # the last long ones: the check above can fail
