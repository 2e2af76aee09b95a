"""The index tables storage.py hands to the kernels and references."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import LAYOUTS, edge_vectors, storages

from mdband.errors import LayoutMismatchError
from mdband.so3 import storage as st


@pytest.mark.parametrize("L,Ls", [(0, 0), (1, 1), (2, 3), (3, 3), (4, 6)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_tables_address_the_band_entries(L, Ls, layout):
    S = storages(edge_vectors(5, torch.float64), Ls)
    data = S[layout].require(layout, "t")
    band = S[st.RotationLayout.BAND].require(st.RotationLayout.BAND, "t")
    t = st.entry_table(layout, Ls, L, "cpu")
    P = st.band_width(L)
    assert t["pos"].shape == (P,)
    red = st.reduced_index(L)
    want = torch.stack(
        [band[:, st.band_offset(Ls, int(d), int(m), int(c) - int(d) ** 2)]
         for d, m, c in zip(t["deg"], t["m"], t["col"])], 1
    )  # fmt: skip
    assert torch.equal(data.reshape(5, -1)[:, t["pos"]], want)
    assert [red[int(r)] for r in t["row"]] == list(zip(t["deg"].tolist(), t["m"].tolist()))
    k = st.kernel_tables(layout, Ls, L, "cpu")
    s0, sa, sb = st.kernel_strides(layout, data)
    seen = 0
    for b in range(k["nblk"]):
        for s in range(k["sp"]):
            r = int(k["row"][b, s])
            if s >= 3 or (b == 0 and s > 0):
                assert r == -1
                continue
            assert red[r] == (b, st.SLOT_M[s])
            for j in range(k["jp"]):
                col = int(k["col"][b, j])
                if col < 0:
                    assert j >= 2 * b + 1
                    continue
                off = int(k["ent_a"][b, s, j]) * sa + int(k["ent_b"][b, s, j]) * sb
                got = data.flatten()[torch.arange(5) * s0 + off]
                assert torch.equal(got, band[:, st.band_offset(Ls, b, st.SLOT_M[s], j)])
                seen += 1
    assert seen == P


def test_degree_above_storage_raises():
    with pytest.raises(LayoutMismatchError):
        st.kernel_tables(st.RotationLayout.BAND, 2, 3, "cpu")
    with pytest.raises(LayoutMismatchError):
        st.entry_table(st.RotationLayout.DENSE, 1, 2, "cpu")
