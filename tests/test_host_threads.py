"""OpenMP's wait policy: importing mdband before torch asks for PASSIVE (threads sleep at the
end of a parallel region instead of spinning on a core another process may need); a policy in
the environment wins; a process that loaded torch first is left as it is."""

import os
import subprocess
import sys

import pytest

PROBE = """
import os, sys
{first}
import mdband
from mdband.host_threads import describe
print(os.environ.get("OMP_WAIT_POLICY"))
print(describe())
"""


@pytest.mark.parametrize(
    "env, first, policy, source",
    [
        (None, "", "PASSIVE", "passive (mdband's default)"),
        ("ACTIVE", "", "ACTIVE", "active (environment)"),
        (None, "import torch", "None", "OpenMP's default (spin, then sleep) (torch imported"),
    ],
)
def test_wait_policy(env, first, policy, source):
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if env is not None:
        environ["OMP_WAIT_POLICY"] = env
    proc = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=environ,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got, line = proc.stdout.splitlines()[-2:]
    assert got == policy
    assert f"OpenMP wait policy {source}" in line, line
