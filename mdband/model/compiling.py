"""The ``compile`` engine setting: torch.compile of the SeZM model's torch code between its ops.

Dynamo does not trace into mdband's fused ops (:func:`make_opaque` makes each call a graph break:
their kernels read constant tables that fake tensors cannot stand in for), so every stretch
of torch code between two ops (norms, FFNs and grid nets, radial MLPs, attention logits) is one
compiled region with a compiled backward. Eager calls of the ops are unchanged.

What it saves per call and what the first call of each new size spends compiling:
BENCHMARKS.md "2026-12-01 (afternoon)" and the torch.compile part of "2026-12-01 (evening)"
(``benchmarks/gpu_profile.py --variants breaks``). Only the unchunked evaluation without a
LAMMPS exchange and without recomputation is compiled; training never is (compiled graphs
cannot be differentiated twice).
"""

from __future__ import annotations

import torch

#: torch.compile backend (tests use "aot_eager": the same graphs, no code generation)
BACKEND = "inductor"


def make_opaque(module, names) -> None:
    """Make the module attributes ``names`` graph breaks under torch.compile.

    Eager calls give the same results. Done on the first compile only, so that a process which never
    compiles keeps the plain functions (no wrapper on every call).
    """
    for name in names:
        fn = getattr(module, name)
        if not getattr(fn, "_mdband_opaque", False):
            wrapped = torch.compiler.disable(fn, recursive=True)
            wrapped._mdband_opaque = True
            setattr(module, name, wrapped)


def compiled(fn):
    """``fn`` compiled for the shapes it meets (a new size recompiles, then dynamically)."""
    return torch.compile(fn, backend=BACKEND, dynamic=False)
