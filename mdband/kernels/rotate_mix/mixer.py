"""rotate_mix's degree mixer: the index tables shared by its torch reference and its kernels.

The compact mixer kernel k (E, K, R), K = (L+1)² + L², holds block |m| = 0 ((L+1)×(L+1)) then
block |m| = 1 (L×L); entry ``(l_in − |m|)(L − |m| + 1) + (l_out − |m|)`` inside block |m|
couples reduced rows (l_in, m) → (l_out, m) (no cross-m mixing; m = ±1 share the |m| = 1 block).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from mdband.kernels import _common as cm
from mdband.so3 import storage as st


def mixer_size(lmax: int) -> int:
    """K = (L+1)² + L²: entries of the |m| = 0 and |m| = 1 mixer blocks."""
    return (lmax + 1) ** 2 + lmax**2


def _k_index(lmax: int, l_in: int, l_out: int, am: int) -> int:
    base = 0 if am == 0 else (lmax + 1) ** 2
    return base + (l_in - am) * (lmax - am + 1) + (l_out - am)


@lru_cache(maxsize=64)
def _mixer_lists(lmax: int):
    """Dense (Dm, Dm) k-index table [in][out] (−1 = no coupling), and the kernel tables.

    Kernel tables: ``kidx`` (NB, SP, LP): k index for input (block b = l_in, slot s) and output
    lane t (l_out = t + |m_s|), −1 if none; ``orow`` (SP, LP): reduced output row of (slot s,
    lane t), −1 if none.
    """
    red = st.reduced_index(lmax)
    dm = len(red)
    kfull = [[-1] * dm for _ in range(dm)]
    for ri, (li, mi) in enumerate(red):
        for ro, (lo, mo) in enumerate(red):
            if mo == mi:
                kfull[ri][ro] = _k_index(lmax, li, lo, abs(mi))
    nb, sp, lp = lmax + 1, st.KERNEL_SLOTS, cm.next_pow2(lmax + 1)
    kidx = [[[-1] * lp for _ in range(sp)] for _ in range(nb)]
    orow = [[-1] * lp for _ in range(sp)]
    for s, m in enumerate(st.SLOT_M):
        for lo in range(abs(m), lmax + 1):
            orow[s][lo - abs(m)] = red.index((lo, m))
            for li in range(abs(m), lmax + 1):
                kidx[li][s][lo - abs(m)] = _k_index(lmax, li, lo, abs(m))
    return kfull, kidx, orow, lp


@lru_cache(maxsize=64)
def mixer_tables(lmax: int, device_str: str) -> dict:
    """Return the kernels' tables on a device: ``kidx`` (NB, SP, LP), ``orow`` (SP, LP), ``lp``."""
    _, kidx, orow, lp = _mixer_lists(lmax)
    dev = torch.device(device_str)

    def t(v):
        return torch.tensor(v, dtype=torch.int32, device=dev)

    return {"kidx": t(kidx), "orow": t(orow), "lp": lp}


def _mixer_gather_index(lmax: int, device) -> torch.Tensor:
    """(Dm·Dm,) index into k padded with one zero entry: [out·Dm + in] → k index or K."""
    return _mixer_gather_cached(lmax, str(torch.device(device)))


@lru_cache(maxsize=64)
def _mixer_gather_cached(lmax: int, device: str) -> torch.Tensor:
    kfull = _mixer_lists(lmax)[0]
    K = mixer_size(lmax)
    dm = len(kfull)
    idx = [kfull[i][o] if kfull[i][o] >= 0 else K for o in range(dm) for i in range(dm)]
    return torch.tensor(idx, dtype=torch.long, device=device)


def mixer_matrix(k: torch.Tensor, lmax: int) -> torch.Tensor:
    """(E, Dm, Dm, R) [out, in, r] from the compact mixer k (E, K, R)."""
    E, _, R = k.shape
    dm = st.reduced_dim(lmax)
    kp = torch.cat([k, k.new_zeros(E, 1, R)], dim=1)
    return kp[:, _mixer_gather_index(lmax, k.device)].view(E, dm, dm, R)


def scatter_mixer_grad(g_matrix: torch.Tensor, lmax: int) -> torch.Tensor:
    """Cotangent (E, K, R) of the compact k from that of :func:`mixer_matrix` (E, Dm, Dm, R)."""
    E, R = g_matrix.shape[0], g_matrix.shape[-1]
    K = mixer_size(lmax)
    gk = g_matrix.new_zeros(E, K + 1, R)
    gk = gk.index_add(1, _mixer_gather_index(lmax, g_matrix.device), g_matrix.reshape(E, -1, R))
    return gk[:, :K]
