"""Launch parameters of the so2_mix_layer kernels (:mod:`mdband.kernels.so2_stack`).

Defaults from the sweeps of ``benchmarks/gpu_stack.py`` on an H200, with per-(L, C) entries
where another launch measured faster (``gpu_stack.py --lmax L --channels C`` reports them).
"""

from __future__ import annotations

#: launch parameters of the linear kernel per precision mode (edges per program, warps,
#: pipeline stages; ``rows``: output rows per program, 1 unless given), from the sweep of
#: ``benchmarks/gpu_stack.py`` on an H200 (tf32x3: about 96 kB of shared memory; the fp16
#: weight tiles are half as large)
CONFIG = {
    "tf32x3": {"BE": 128, "warps": 8, "stages": 2},
    "fp16x3": {"BE": 128, "warps": 8, "stages": 2},
    "fp16": {"BE": 128, "warps": 8, "stages": 2},
}
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
#: on an H200, keyed (L, C): "linear" replaces CONFIG["tf32x3"] ("linear-fp16x3" and
#: "linear-fp16" the other modes' entries), "gate" gives the gate
#: kernels' edges per program (BE) and warps (fwd_warps, bwd_warps)
SHAPE_CONFIG: dict[tuple[int, int], dict[str, dict]] = {
    # DPA4-Mini (647,154 edges): linear 0.69 -> 0.57 ms, gate backward 0.64 -> 0.30 ms
    # the default config (L = 3, C = 64), fp16 modes (2026-12-01 sweep, 647,154 edges):
    # fp16x3 linear 2.56 -> 2.39 ms (tf32x3 3.16 ms), fp16 1.64 ms; 2026-12-02
    # (linear_variants.py, after the per-row scaling of x): fp16x3 3.27 ms with one row per
    # program, 2.92 with two (tf32x3: 2.91 with one, 3.72 with two: it keeps one)
    (3, 64): {
        "linear-fp16x3": {"BE": 64, "warps": 4, "stages": 2, "rows": 2},
        "linear-fp16": {"BE": 64, "warps": 4, "stages": 2},
    },
    (2, 32): {
        "linear": {"BE": 256, "warps": 4, "stages": 3},
        "linear-fp16x3": {"BE": 64, "warps": 4, "stages": 3},  # 0.52 ms (tf32x3 0.59)
        "linear-fp16": {"BE": 256, "warps": 4, "stages": 3},  # 0.38 ms
        "gate": {"BE": 16, "fwd_warps": 8, "bwd_warps": 2},
    },
}


def linear_config(precision: str, L: int, C: int) -> dict:
    """Launch (BE, warps, stages) of the linear kernel in ``precision`` for degree L and C
    channels."""
    key = "linear" if precision == "tf32x3" else f"linear-{precision}"
    return SHAPE_CONFIG.get((L, C), {}).get(key, CONFIG[precision])


def linear_slots(L: int, rows: int) -> int:
    """Programs per edge block of the linear kernel: its 3L + 1 output rows one by one
    (``rows = 1``), or in pairs of one m-group (``rows = 2``: ⌈(L + 1) / 2⌉ m = 0 pairs and L
    |m| = 1 pairs)."""
    if rows == 1:
        return 3 * L + 1
    if rows == 2:
        return (L + 2) // 2 + L
    raise ValueError(f"so2_mix_layer: a launch has 1 or 2 rows per program, got {rows}")


def gate_config(L: int, C: int) -> dict:
    """Launch of the gate kernels: edges per program BE, fwd_warps and bwd_warps."""
    default = {"BE": ELEMENTWISE_BE, "fwd_warps": 4, "bwd_warps": ELEMENTWISE_WARPS}
    return SHAPE_CONFIG.get((L, C), {}).get("gate", default)
