"""Parity of mdband's equivariant FFNs, readouts and message-node grid net with deepmd-kit.

Fixtures (``tests/fixtures/modules/*.npz``) come from deepmd-kit 3.2.0's own modules with random
weights (``tests/fixtures/make_module_fixtures.py``). The equivariance tests need no fixture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mdband.errors import UnsupportedModelError
from mdband.model.ffn import build_block_ffn, build_readout, resolve_ffn_width
from mdband.model.message_grid import MessageNodeSO3
from mdband.so3.wigner import dense_from_unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "modules"
CASES = sorted(p.stem for p in FIXTURES.glob("*.npz"))
# deepmd-kit keeps these integer index tables as persistent buffers; mdband derives them.
DEEPMD_INDEX_BUFFERS = ("expand_index",)


def _load_case(name: str):
    data = np.load(FIXTURES / f"{name}.npz")
    kind = str(data["kind"])
    lmax = int(data["lmax"])
    channels = int(data["channels"])
    opts = json.loads(str(data["opts"]))
    if kind == "block_ffn":
        module = build_block_ffn(lmax, channels, opts)
    elif kind == "readout":
        module = build_readout(lmax, channels, opts)
    else:
        module = MessageNodeSO3(lmax, channels, opts)
    module = module.double()
    state, dropped = {}, []
    for key in data.files:
        if not key.startswith("sd/"):
            continue
        name_ = key[3:]
        if name_.split(".")[-1] in DEEPMD_INDEX_BUFFERS:
            dropped.append(name_)
            assert data[key].dtype.kind == "i"
            continue
        state[name_] = torch.from_numpy(data[key])
    module.load_state_dict(state, strict=True)
    return data, kind, module


def test_fixtures_present():
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", CASES)
def test_parity_with_deepmd(name):
    data, kind, module = _load_case(name)
    x = torch.from_numpy(data["x"])
    with torch.no_grad():
        y = module(x, torch.from_numpy(data["x1"])) if kind == "message_node" else module(x)
    ref = torch.from_numpy(data["y"])
    assert y.shape == ref.shape
    scale = max(1.0, float(ref.abs().max()))
    err = float((y - ref).abs().max())
    assert err <= 1e-10 * scale, f"{name}: max abs diff {err:.3e}"


# ---------------------------------------------------------------- builders and state-dict names

S2 = {}
GATED = {"s2_activation": [False, False]}
SO3_BRANCH = {"ffn_so3_grid": True, "grid_branch": [0, 0, 2]}
SO3_GLU = {"ffn_so3_grid": True}
SO3_MLP = {"ffn_so3_grid": True, "grid_mlp": [False, False, True]}

BLOCK_KEYS = {
    "s2": (S2, {"act.scalar_gate.weight"}),
    "gated": (GATED, {"act.gate_linear.weight"}),
    "so3_branch": (
        SO3_BRANCH,
        {
            "act.scalar_gate.weight",
            "act.grid_op.left_proj.weight",
            "act.grid_op.right_proj.weight",
            "act.grid_op.router.weight",
            "act.grid_op.out_proj.weight",
        },
    ),
    "so3_glu": (SO3_GLU, {"act.scalar_gate.weight"}),
    "so3_mlp": (
        SO3_MLP,
        {
            "act.scalar_gate.weight",
            "act.grid_op.left_proj.weight",
            "act.grid_op.right_proj.weight",
            "act.grid_op.out_proj.weight",
        },
    ),
}


@pytest.mark.parametrize("variant", sorted(BLOCK_KEYS))
def test_block_state_dict_names(variant):
    opts, act_keys = BLOCK_KEYS[variant]
    sd = build_block_ffn(2, 8, dict(opts, ffn_neurons=16)).state_dict()
    assert set(sd) == {"so3_linear_1.weight", "so3_linear_2.weight"} | act_keys


def test_block_shapes():
    c, h = 8, 16
    sd = build_block_ffn(2, c, {"ffn_neurons": h}).state_dict()
    assert sd["so3_linear_1.weight"].shape == (3, c, 2 * h)
    assert sd["act.scalar_gate.weight"].shape == (2 * h, h)
    assert sd["so3_linear_2.weight"].shape == (3, h, c)
    sd = build_block_ffn(3, c, dict(SO3_BRANCH, ffn_neurons=h, kmax=2)).state_dict()
    assert sd["so3_linear_1.weight"].shape == (4, c, 2 * 5 * h)
    assert sd["act.grid_op.left_proj.weight"].shape == (h, 2 * h)
    assert sd["act.grid_op.router.weight"].shape == (2 * h, 2)
    assert sd["act.grid_op.out_proj.weight"].shape == (h, h)
    assert sd["so3_linear_2.weight"].shape == (4, 5 * h, c)
    # kmax is clipped to the block degree, as deepmd-kit does (k_b = min(kmax, l_b))
    sd = build_block_ffn(1, c, dict(SO3_GLU, ffn_neurons=h, kmax=3)).state_dict()
    assert sd["so3_linear_2.weight"].shape == (2, 3 * h, c)
    # plain gated FFN without GLU
    sd = build_block_ffn(2, c, dict(GATED, ffn_neurons=h, glu_activation=False)).state_dict()
    assert sd["so3_linear_1.weight"].shape == (3, c, h)
    assert sd["act.gate_linear.weight"].shape == (h, 2 * h)


def test_readout_state_dict_names():
    none = build_readout(2, 8, {"ffn_neurons": 16}).state_dict()
    assert set(none) == {"so3_linear_1.weight", "so3_linear_2.weight"}
    assert none["so3_linear_1.weight"].shape == (1, 8, 32)
    glu = build_readout(2, 8, {"ffn_neurons": 16, "so3_readout": "glu"}).state_dict()
    assert set(glu) == {"so3_linear_1.weight", "act.scalar_gate.weight", "so3_linear_2.weight"}
    mlp = build_readout(2, 8, {"ffn_neurons": 16, "so3_readout": "mlp"}).state_dict()
    assert mlp["act.grid_op.left_proj.weight"].shape == (32, 32)
    assert mlp["act.grid_op.out_proj.weight"].shape == (32, 16)


def test_message_node_state_dict_names():
    sd = MessageNodeSO3(2, 8, {"n_focus": 2, "focus_dim": 4}).state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {
        "residual_scale": (2, 4),
        "frame_expand.weight": (3, 4, 12),
        "frame_contract.weight": (3, 12, 4),
        "scalar_gate.weight": (8, 8),
    }


def test_ffn_width_rule():
    assert resolve_ffn_width(0, 64, True) == 192
    assert resolve_ffn_width(0, 32, True) == 96
    assert resolve_ffn_width(0, 64, False) == 256
    assert resolve_ffn_width(40, 64, True) == 40
    # grid FFNs force GLU width even when glu_activation is False
    sd = build_block_ffn(1, 32, {"glu_activation": False}).state_dict()
    assert sd["act.scalar_gate.weight"].shape == (192, 96)
    sd = build_block_ffn(1, 32, dict(GATED, glu_activation=False)).state_dict()
    assert sd["so3_linear_1.weight"].shape == (2, 32, 128)
    # the readout follows glu_activation
    sd = build_readout(1, 32, {"so3_readout": "mlp", "glu_activation": False}).state_dict()
    assert sd["so3_linear_2.weight"].shape == (2, 3 * 128, 32)


def test_so3_grid_takes_precedence_over_s2():
    m = build_block_ffn(2, 8, {"s2_activation": [False, True], "ffn_so3_grid": True})
    assert m.grid == "so3"


@pytest.mark.parametrize(
    "builder,opts,option",
    [
        ("block", {"mlp_bias": True}, "mlp_bias"),
        ("block", {"lebedev_quadrature": 0}, "lebedev_quadrature"),
        ("block", {"lebedev_quadrature": [True, 0]}, "lebedev_quadrature"),
        ("block", dict(GATED, activation_function="silut:3.0"), "activation_function"),
        ("block", dict(GATED, activation_function="bogus"), "activation_function"),
        ("block", {"grid_branch": [0, 1]}, "grid_branch"),
        ("readout", {"readout_layers": 2}, "readout_layers"),
        ("readout", {"so3_readout": "attn"}, "so3_readout"),
        ("readout", {"mlp_bias": True}, "mlp_bias"),
        ("readout", {"activation_function": "custom_silu"}, "activation_function"),
        ("message", {"mlp_bias": True}, "mlp_bias"),
    ],
)
def test_unsupported_options(builder, opts, option):
    with pytest.raises(UnsupportedModelError) as info:
        if builder == "block":
            build_block_ffn(2, 8, opts)
        elif builder == "readout":
            build_readout(2, 8, opts)
        else:
            MessageNodeSO3(2, 8, opts)
    assert info.value.option == option


def test_lebedev_flag_irrelevant_for_so3_grids():
    a = build_block_ffn(2, 8, dict(SO3_GLU, lebedev_quadrature=False))
    b = build_block_ffn(2, 8, SO3_GLU)
    assert a.act.proj is b.act.proj
    build_readout(2, 8, {"so3_readout": "mlp", "lebedev_quadrature": False})


@pytest.mark.parametrize("leb,grid_points", [(True, None), (False, 64), ([False, True], None)])
def test_lebedev_flag_picks_the_s2_ffn_grid(leb, grid_points):
    """The FFN entry of lebedev_quadrature picks e3nn's 8 × 8 product grid at L = 2 (deepmd-kit's
    resolution max(2L+4, 3L+2)); its matrices hold float32 values, as deepmd-kit builds them."""
    m = build_block_ffn(2, 8, {"lebedev_quadrature": leb})
    proj = m.act.proj
    if grid_points is None:
        assert proj is build_block_ffn(2, 8, S2).act.proj
        return
    assert proj.grid_size == grid_points and proj.to_grid.dtype == torch.float64
    for mat in (proj.to_grid, proj.from_grid):
        assert torch.equal(mat.float().double(), mat)
    # B·T is close to, but not exactly, the identity: a product grid, not an exact rule
    eye = proj.from_grid @ proj.to_grid
    assert torch.allclose(eye, torch.eye(9, dtype=torch.float64), atol=1e-6)


def test_no_grid_tensors_in_state_dict():
    for m in (
        build_block_ffn(2, 8, SO3_BRANCH),
        build_readout(2, 8, {"so3_readout": "mlp"}),
        MessageNodeSO3(2, 8, {}),
    ):
        sd = m.state_dict()
        assert all(k.endswith(".weight") or k == "residual_scale" for k in sd)
        assert len(sd) == len(list(m.parameters()))


# ---------------------------------------------------------------- equivariance (no fixtures)


def _randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    module = module.double()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name == "residual_scale":
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))
            else:
                fan_in = p.shape[-2] if p.dim() >= 2 else p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / fan_in**0.5)
    return module


def _rotations(lmax: int, n: int = 3, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=torch.float64), dim=-1)
    d = dense_from_unit(u, lmax)
    # compose with a second rotation so the roll about u is generic too
    v = torch.nn.functional.normalize(torch.randn(n, 3, generator=g, dtype=torch.float64), dim=-1)
    return d @ dense_from_unit(v, lmax)


def _rot(d: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,njc->nic", d, x)


EQUIV_BLOCK = [
    (1, S2),
    (2, S2),
    (3, S2),
    (2, GATED),
    (3, dict(GATED, glu_activation=False, activation_function="tanh")),
    (2, SO3_GLU),
    (2, SO3_MLP),
    (1, {"ffn_so3_grid": True, "grid_branch": [0, 0, 1]}),
    (3, SO3_BRANCH),
    (3, dict(SO3_BRANCH, kmax=2)),
    (2, dict(SO3_GLU, kmax=0)),
    (2, {"grid_branch": 2}),
    (2, {"grid_mlp": True}),
]


@pytest.mark.parametrize("lmax,opts", EQUIV_BLOCK)
def test_block_ffn_equivariant(lmax, opts):
    m = _randomize(build_block_ffn(lmax, 6, dict(opts, ffn_neurons=8)), lmax)
    x = torch.randn(4, (lmax + 1) ** 2, 6, dtype=torch.float64)
    with torch.no_grad():
        y = m(x)
        for d in _rotations(lmax, seed=lmax):
            err = (m(_rot(d, x)) - _rot(d, y)).abs().max()
            assert float(err) <= 1e-10 * max(1.0, float(y.abs().max()))


@pytest.mark.parametrize("lmax,mode", [(1, "glu"), (2, "mlp"), (3, "mlp"), (2, "none")])
def test_readout_invariant(lmax, mode):
    m = _randomize(build_readout(lmax, 6, {"so3_readout": mode, "ffn_neurons": 8}), lmax)
    x = torch.randn(4, (lmax + 1) ** 2, 6, dtype=torch.float64)
    with torch.no_grad():
        y = m(x)
        assert y.shape == (4, 6)
        for d in _rotations(lmax, seed=10 + lmax):
            assert torch.allclose(m(_rot(d, x)), y, atol=1e-10, rtol=0)


@pytest.mark.parametrize(
    "lmax,opts",
    [
        (1, {}),
        (2, {}),
        (3, {"kmax": 2}),
        (2, {"n_focus": 2, "focus_dim": 3}),
        (2, {"grid_mlp": [False, True, False]}),
        (2, {"grid_branch": [0, 2, 0], "n_focus": 2, "focus_dim": 3}),
    ],
)
def test_message_node_equivariant(lmax, opts):
    m = _randomize(MessageNodeSO3(lmax, 6, opts), lmax)
    width = int(opts.get("n_focus", 1)) * (int(opts.get("focus_dim", 0)) or 6)
    out = torch.randn(4, (lmax + 1) ** 2, width, dtype=torch.float64)
    x1 = torch.randn(4, (lmax + 1) ** 2, width, dtype=torch.float64)
    with torch.no_grad():
        y = m(out, x1)
        for d in _rotations(lmax, seed=20 + lmax):
            err = (m(_rot(d, out), _rot(d, x1)) - _rot(d, y)).abs().max()
            assert float(err) <= 1e-10 * max(1.0, float(y.abs().max()))


# ---------------------------------------------------------------- dtype and autograd


def test_float32_matches_float64():
    m64 = _randomize(build_block_ffn(2, 6, dict(SO3_BRANCH, ffn_neurons=8)), 3)
    m32 = build_block_ffn(2, 6, dict(SO3_BRANCH, ffn_neurons=8))
    m32.load_state_dict({k: v.float() for k, v in m64.state_dict().items()})
    x = torch.randn(4, 9, 6, dtype=torch.float64)
    with torch.no_grad():
        y32 = m32(x.float())
        assert y32.dtype == torch.float32
        assert torch.allclose(y32.double(), m64(x), atol=1e-4)


def test_gradcheck():
    ffn = _randomize(build_block_ffn(1, 3, dict(SO3_BRANCH, ffn_neurons=4)), 5)
    ro = _randomize(build_readout(1, 3, {"so3_readout": "mlp", "ffn_neurons": 4}), 6)
    msg = _randomize(MessageNodeSO3(1, 3, {}), 7)
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    x1 = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ffn, (x,), fast_mode=True)
    assert torch.autograd.gradcheck(ro, (x,), fast_mode=True)
    assert torch.autograd.gradcheck(msg, (x, x1), fast_mode=True)
