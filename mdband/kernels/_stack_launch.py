"""Launch parameters of the so2_mix_layer kernels (:mod:`mdband.kernels.so2_stack`).

Defaults from the sweeps of ``benchmarks/gpu_stack.py`` on an H200, with per-(L, C) entries
where another launch measured faster (``gpu_stack.py --lmax L --channels C`` reports them).
"""

from __future__ import annotations

#: launch parameters of the tf32x3 linear kernel (edges per program, warps, pipeline stages),
#: from the sweep of ``benchmarks/gpu_stack.py`` on an H200 (about 96 kB of shared memory)
CONFIG = {"tf32x3": {"BE": 128, "warps": 8, "stages": 2}}
#: smaller launches tried in turn when shared memory runs out (about 64 and 32 kB)
FALLBACK_CONFIGS = (
    {"BE": 64, "warps": 4, "stages": 2},
    {"BE": 64, "warps": 4, "stages": 1},
)
#: edges per program of the gate kernels, and warps of the backward one (no register spills on
#: sm90 at L = 3, C = 64)
ELEMENTWISE_BE = 32
ELEMENTWISE_WARPS = 8
#: per-shape launches that beat the defaults above in the sweep of ``benchmarks/gpu_stack.py``
#: on an H200, keyed (L, C): "linear" replaces CONFIG["tf32x3"], "gate" gives the gate
#: kernels' edges per program (BE) and warps (fwd_warps, bwd_warps)
SHAPE_CONFIG: dict[tuple[int, int], dict[str, dict]] = {
    # DPA4-Mini (647,154 edges): linear 0.69 -> 0.57 ms, gate backward 0.64 -> 0.30 ms
    (2, 32): {
        "linear": {"BE": 256, "warps": 4, "stages": 3},
        "gate": {"BE": 16, "fwd_warps": 8, "bwd_warps": 2},
    },
}


def linear_config(precision: str, L: int, C: int) -> dict:
    """Launch (BE, warps, stages) of the tf32x3 linear kernel for degree L and C channels."""
    return SHAPE_CONFIG.get((L, C), {}).get("linear", CONFIG[precision])


def gate_config(L: int, C: int) -> dict:
    """Launch of the gate kernels: edges per program BE, fwd_warps and bwd_warps."""
    default = {"BE": ELEMENTWISE_BE, "fwd_warps": 4, "bwd_warps": ELEMENTWISE_WARPS}
    return SHAPE_CONFIG.get((L, C), {}).get("gate", default)
