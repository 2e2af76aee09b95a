"""How torch's CPU threads wait for each other: OpenMP's wait policy, chosen before torch starts.

torch runs CPU operators on an OpenMP thread team. A thread that reaches the end of a
parallel region first waits there for the others; by default (``OMP_WAIT_POLICY`` unset, GNU
OpenMP) it spins for a while before it sleeps, and with ``ACTIVE`` it only spins. When another
process holds one of the cores, the spinning thread takes the CPU time the late thread needs,
and every one of the thousands of parallel regions of a step waits for the scheduler: a
2-thread ``mdband run`` of the quick start (2048 atoms, a 2-core machine with one busy core)
took 16-19 s per step with the default or ``ACTIVE`` policy and 1.4 s with ``PASSIVE``, where
one thread took 3.1 s (same machine and load; the summary of issue 44 in the project log).

So mdband asks for ``PASSIVE`` (threads sleep at once): importing :mod:`mdband` before torch
sets ``OMP_WAIT_POLICY=PASSIVE`` unless the environment already names a policy, which then
wins (``OMP_WAIT_POLICY=ACTIVE mdband run ...`` restores spinning). OpenMP reads the variable
once, when torch loads it: a process that imported torch first keeps whatever it had.
Child processes (``mpirun``, LAMMPS ranks) inherit the variable.
"""

from __future__ import annotations

import os
import sys

DEFAULT_WAIT_POLICY = "PASSIVE"
_state: dict[str, str | None] = {"source": None}


def apply_wait_policy() -> None:
    """Set ``OMP_WAIT_POLICY`` to the default if it is unset and torch is not loaded yet.

    The default is :data:`DEFAULT_WAIT_POLICY`; torch's loading also loads its OpenMP runtime,
    which reads the variable. Records where the policy in force comes from.
    """
    if _state["source"] is not None:
        return
    if "OMP_WAIT_POLICY" in os.environ:
        _state["source"] = "environment"
    elif "torch" in sys.modules:
        _state["source"] = "torch imported before mdband"
    else:
        os.environ["OMP_WAIT_POLICY"] = DEFAULT_WAIT_POLICY
        _state["source"] = "mdband's default"


def describe() -> str:
    """One line: torch's CPU threads and the OpenMP wait policy in force, and why."""
    import torch

    policy = os.environ.get("OMP_WAIT_POLICY")
    text = policy.lower() if policy else "OpenMP's default (spin, then sleep)"
    source = _state["source"] or "not set by mdband"
    return f"{torch.get_num_threads()} torch thread(s), OpenMP wait policy {text} ({source})"
