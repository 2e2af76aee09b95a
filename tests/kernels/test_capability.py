"""The capability gate, the layout request, the sentinel storage and mis-tagged storages."""

from __future__ import annotations

import itertools

import pytest
import torch
from kernel_helpers import LAYOUTS, edge_vectors, storages

from mdband.errors import LayoutMismatchError
from mdband.kernels import _common as cm
from mdband.kernels import capability as cap
from mdband.kernels.aggregate import aggregate
from mdband.kernels.rotate_mix import mixer_size, rotate_mix
from mdband.kernels.zonal import zonal_embed
from mdband.so3 import storage as st
from mdband.so3.storage import RotationLayout
from mdband.testing.sentinel import SentinelStorage

BAND, DENSE = RotationLayout.BAND, RotationLayout.DENSE


def _model_specs(device, dtype, *, mmax, n_heads, mixer, channels=64, lmax=3):
    """The consumers a SeZM-like model would declare (one block)."""
    return [
        cap.spec_for_band_producer(device, dtype, lmax=lmax),
        cap.spec_for_zonal_embed(device, dtype, lmax=lmax, channels=channels, name="gie"),
        cap.spec_for_rotate_mix(
            device, dtype, lmax=lmax, mmax=mmax, mixer=mixer, channels=channels, name="b0.rotmix"
        ),
        cap.spec_for_aggregate(
            device, dtype, lmax=lmax, channels=channels, n_heads=n_heads, mmax=mmax, name="b0.agg"
        ),
        cap.spec_for_force_assembly(device, dtype),
    ]


MATRIX = list(
    itertools.product(
        [True, False],  # triton importable
        ["0", "1"],  # TRITON_INTERPRET
        ["cpu", "cuda"],
        [torch.float32, torch.bfloat16],
        [1, 2],  # mmax
        [0, 1, 3],  # attention heads (3 does not divide 64 channels)
        ["degree_channel", "none", "degree"],
        ["auto", "band", "dense"],
    )
)


@pytest.mark.parametrize(
    "avail,interp,device,dtype,mmax,heads,mixer,req",
    MATRIX,
    ids=["-".join(str(p) for p in case) for case in MATRIX],
)
def test_gate_matrix(monkeypatch, avail, interp, device, dtype, mmax, heads, mixer, req):
    monkeypatch.setattr(cm, "TRITON_AVAILABLE", avail)
    monkeypatch.setenv("TRITON_INTERPRET", interp)
    specs = _model_specs(device, dtype, mmax=mmax, n_heads=heads, mixer=mixer)
    layout, blocking, reason = cap.decide_layout(specs, req)
    refusing = {s.name for s in specs if BAND not in s.accepts}
    # band iff every consumer accepts it and dense was not requested
    assert (layout is BAND) == (req != "dense" and not refusing)
    assert set(blocking) == (refusing if req != "dense" else set())
    for name in blocking:
        assert name in reason
    # who refuses follows the op predicates (options), not the availability of Triton
    want = set()
    if mmax != 1 or mixer == "degree":
        want.add("b0.rotmix")
    if mmax != 1 or (heads and 64 % heads):
        want.add("b0.agg")
    assert refusing == want
    # the backend named in the reason is the one the dispatch would pick
    triton_expected = avail and device == "cuda" and dtype in (torch.float32, torch.float64)
    for s in specs:
        if BAND in s.accepts:
            assert s.reason.startswith("triton" if triton_expected else "reference"), s.reason
    assert cap.triton_available(device) == (avail and (device == "cuda" or interp == "1"))


def test_decide_layout_rules():
    ok = cap.ConsumerSpec("a", frozenset({BAND, DENSE}), "fine")
    no = cap.ConsumerSpec("cutile", frozenset({DENSE}), "dense-only backend")
    assert cap.decide_layout([ok, ok], "auto")[0] is BAND
    assert cap.decide_layout([ok], "band")[0] is BAND
    layout, blocking, reason = cap.decide_layout([ok, no], "band")  # band cannot be forced
    assert layout is DENSE and blocking == ["cutile"] and "cutile" in reason
    assert cap.decide_layout([ok, no], "auto")[:2] == (DENSE, ["cutile"])
    assert cap.decide_layout([ok], "dense") == (DENSE, [], "dense requested")
    assert cap.decide_layout([], "auto")[0] is DENSE
    with pytest.raises(ValueError):
        cap.decide_layout([ok], "banded")


def test_requested_layout_reads_no_environment(monkeypatch):
    """The gate normalises the request it is given; the environment override is the
    settings' (one parser: ``EngineSettings`` reads ``MDBAND_ROTATION_LAYOUT``)."""
    from mdband.settings import EngineSettings

    assert cap.requested_layout(" AUTO ") == "auto"
    assert cap.requested_layout("band") == "band"
    with pytest.raises(ValueError, match="rotation layout"):
        cap.requested_layout("sparse")
    monkeypatch.setenv("MDBAND_ROTATION_LAYOUT", "dense")
    assert cap.requested_layout("auto") == "auto"  # the environment is not read here
    requested = EngineSettings.resolve().rotation_layout
    assert requested == "dense"
    ok = cap.ConsumerSpec("a", frozenset({BAND, DENSE}), "fine")
    assert cap.decide_layout([ok], requested)[0] is DENSE
    monkeypatch.setenv("MDBAND_ROTATION_LAYOUT", "packed")
    with pytest.raises(ValueError, match="MDBAND_ROTATION_LAYOUT"):
        EngineSettings.resolve()


def test_spec_matches_dispatch_errors():
    """An op whose spec says "not applicable" also refuses to run."""
    spec = cap.spec_for_aggregate("cpu", torch.float64, lmax=1, channels=6, n_heads=4)
    assert BAND not in spec.accepts
    S = storages(edge_vectors(3, torch.float64), 1)[BAND]
    y = torch.zeros(3, 4, 6, dtype=torch.float64)
    rho = st.rotate_inv_rescale(1)
    f64 = {"dtype": torch.float64}
    dst = torch.zeros(3, dtype=torch.long)
    with pytest.raises(ValueError):
        aggregate(
            y, S, 1, rho, dst, 2, torch.ones(3, **f64), logits=torch.zeros(3, 4, **f64),
            z=torch.ones(4, **f64),
        )  # fmt: skip


def test_force_triton_needs_a_device(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with cm.force_triton(), pytest.raises(RuntimeError):
        cm.select_backend("cpu", torch.float32)
    with pytest.raises(ValueError):
        with cm.force_backend("cuda"):
            pass


# ---------------------------------------------------------------------------- sentinel & mis-tags
def _consumers(S, device="cpu"):
    """Run every consumer once (forward + backward) on storage S."""
    L = 2
    E, N, C = S.n_edges, 4, 4
    g = torch.Generator().manual_seed(0)
    dt = torch.float64
    src = torch.randint(0, N, (E,), generator=g).to(device)
    dst = torch.randint(0, N, (E,), generator=g).to(device)
    x = torch.randn(N, st.dim_of(L), C, generator=g, dtype=dt).to(device).requires_grad_(True)
    k = torch.randn(E, mixer_size(L), 1, generator=g, dtype=dt).to(device)
    b = torch.randn(1, C, generator=g, dtype=dt).to(device)
    y = rotate_mix(x, src, S, L, k, b)
    env = torch.rand(E, generator=g, dtype=dt).to(device)
    out = aggregate(y, S, L, st.rotate_inv_rescale(L, dt, device), dst, N, env,
                    logits=torch.zeros(E, 2, dtype=dt, device=device),
                    z=torch.ones(2, dtype=dt, device=device))  # fmt: skip
    radial = torch.randn(E, L + 1, C, generator=g, dtype=dt).to(device)
    out = out + zonal_embed(S, radial, dst, torch.ones(N, dtype=dt, device=device))
    out.sum().backward()
    return x.grad


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_sentinel_sees_only_declared_reads(kdev, layout, backend):
    S0 = storages(edge_vectors(6, torch.float64), 3)[layout]
    data = S0.require(layout, "t").to(kdev).requires_grad_(True)
    S = SentinelStorage(layout, 3, data)
    with cm.force_backend(backend):
        _consumers(S, kdev)
    assert not S.violations
    assert {c for c, _ in S.reads} == {"rotate_mix", "aggregate", "zonal_embed"}
    assert all(lay is layout for _, lay in S.reads)
    assert data.grad is not None and data.grad.shape == data.shape
    with pytest.raises(LayoutMismatchError):
        S.data  # noqa: B018 - a direct read is refused
    other = DENSE if layout is BAND else BAND
    with pytest.raises(LayoutMismatchError):
        S.require(other, "a dense-only consumer")
    assert len(S.violations) == 2


@pytest.mark.parametrize("L", [1, 2, 3])
def test_mistagged_storage_raises(L):
    S = storages(edge_vectors(4, torch.float64), L)
    band = S[BAND].require(BAND, "t")
    dense = S[DENSE].require(DENSE, "t")
    with pytest.raises(LayoutMismatchError):
        st.RotationStorage(DENSE, L, band)
    with pytest.raises(LayoutMismatchError):
        st.RotationStorage(BAND, L, dense)
    with pytest.raises(LayoutMismatchError):
        SentinelStorage(BAND, L + 1, band)  # a band of lmax L tagged lmax L+1
    # the raw op checks the (tensor, layout code, lmax) triple too
    x = torch.zeros(3, st.dim_of(L), 2, dtype=torch.float64)
    src = torch.zeros(4, dtype=torch.long)
    rad = torch.zeros(4, st.reduced_dim(L), 2, dtype=torch.float64)
    code_dense = st.LAYOUT_CODE[DENSE]
    with pytest.raises(LayoutMismatchError):
        torch.ops.mdband.rotate_mix(x, src, band, code_dense, L, L, None, None, rad,
                                    *cm.csr(src, 3))  # fmt: skip
    with pytest.raises(LayoutMismatchError):  # consumer degree above the storage's
        rotate_mix(torch.zeros(3, st.dim_of(L + 1), 2, dtype=torch.float64), src, S[BAND], L + 1,
                   rad=torch.zeros(4, st.reduced_dim(L + 1), 2, dtype=torch.float64))  # fmt: skip
