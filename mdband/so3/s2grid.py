"""deepmd-kit's product S2 grid (``lebedev_quadrature: false``): e3nn's ToS2Grid, FromS2Grid.

With ``lebedev_quadrature`` false for the FFN, deepmd-kit's S2 grid nets sample the sphere on
e3nn's Kostelec–Rockmore product grid instead of a Lebedev rule: ``res_β`` polar angles
``β_i = π(i + ½)/res_β`` times ``res_α`` uniform azimuths, both ``M = max(2L + 4, ⌈3L + 2⌉_even)``
for a full-order (mmax = L) FFN grid of degree L (deepmd-kit ``resolve_s2_grid_resolution`` and
``EquivariantFFN``). That grid is not exact for the degree-3L integrand of a grid product, so its
points and weights change the numbers and must be deepmd-kit's own.

The matrices are e3nn's, built as deepmd-kit builds them (``S2GridProjector`` with
``grid_method="e3nn"``, component normalisation): ``T[(b,a), (l,m)] = Σ shb[m,b,i]·sha[a,m]``
(``= Y_lm(x_ba)/√(L+1)``, the sphere harmonics in SeZM's basis) and ``B`` likewise from
``FromS2Grid``. deepmd-kit constructs them under its default dtype, float32, and only then casts
the buffers to the model's precision, so its float64 models compute with float32-rounded grid
matrices: mdband builds them the same way (with e3nn, the library deepmd-kit calls; we do not
re-derive e3nn's float32 rounding) and keeps the float32 values, exactly, as float64 masters.
"""

from __future__ import annotations

import torch


def e3nn_resolution(lmax: int) -> int:
    """Points per angle M of deepmd-kit's FFN e3nn grid of degree ``lmax`` (M × M points)."""
    phi = 2 * lmax + 4
    theta = 3 * lmax + 2
    theta += theta % 2
    return max(phi, theta)


def e3nn_s2_matrices(lmax: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the matrices ``(to_grid (G, D), from_grid (D, G))`` of deepmd-kit's e3nn S2 grid.

    They are float64 tensors holding float32 values (G = M², D = (lmax+1)², grid index ``b·M + a``).
    """
    try:
        from e3nn.o3 import FromS2Grid, ToS2Grid
    except ImportError as exc:  # pragma: no cover - e3nn is a dependency of mdband
        from mdband.errors import UnsupportedModelError

        raise UnsupportedModelError(
            "lebedev_quadrature", False, f"the e3nn S2 grid needs the e3nn package ({exc})"
        ) from exc
    res = e3nn_resolution(lmax)
    f32 = torch.float32
    with torch.device("cpu"):
        to = ToS2Grid(lmax, (res, res), normalization="component", dtype=f32, device="cpu")
        t = torch.einsum("mbi,am->bai", to.shb, to.sha).detach()
        fr = FromS2Grid((res, res), lmax, normalization="component", dtype=f32, device="cpu")
        b = torch.einsum("am,mbi->bai", fr.sha, fr.shb).detach()
    t = t.flatten(0, 1).to(torch.float64).contiguous()
    b = b.flatten(0, 1).transpose(0, 1).to(torch.float64).contiguous()
    return t, b
