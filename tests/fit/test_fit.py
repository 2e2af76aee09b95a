"""``mdband.fit``: loss physics, training reduces the loss, resume, fine-tuning, typed errors."""

import ase.io
import numpy as np
import pytest
import torch
from conftest import TINY, emt_frames

import mdband
from mdband.errors import UnknownElementError
from mdband.fit import (
    CheckpointMismatchError,
    DatasetError,
    FitConfig,
    FitConfigError,
    OutputExistsError,
)
from mdband.fit.data import collate, read_frames, to_graph
from mdband.fit.loss import loss_terms, predict
from mdband.model.factory import random_potential

FAST = {
    "batch_size": 1,
    "lr": 5e-3,
    "dtype": "float64",
    "val_fraction": 0.25,
    "seed": 0,
    "energy_weight": 1.0,
    "virial_weight": 0.1,
}


def test_predict_matches_potential_forces_and_virial(tmp_path):
    """The training path (batched, edge gradients) gives Potential.evaluate's numbers."""
    cfg = {"type_map": ["Cu"], "channels": 8, "l_schedule": [1], "n_radial": 6, "rcut": 4.0}
    pot = random_potential(cfg, seed=1, gain=0.5, dtype="float64")
    frames = emt_frames(3, seed=7)
    path = tmp_path / "f.extxyz"
    ase.io.write(path, frames, format="extxyz")
    read = read_frames(path)
    graphs = [to_graph(f, {"Cu": 0}, 4.0) for f in read]
    e, f, w = (t.detach() for t in predict(pot.model, collate(graphs), torch.float64, False))
    off = 0
    for k, a in enumerate(read):
        ref = pot.evaluate(a.positions, a.cell, True, a.species)
        n = a.n_atoms
        assert float(e[k]) == pytest.approx(ref.energy, abs=1e-9)
        np.testing.assert_allclose(f[off : off + n].numpy(), ref.forces, atol=1e-10)
        np.testing.assert_allclose(w[k].numpy(), ref.virial, atol=1e-9)
        off += n


def test_loss_gradient_through_forces_matches_finite_difference(tmp_path):
    """Double backward: d(loss)/d(weight) of the force + virial loss, autograd vs central FD."""
    cfg = {"type_map": ["Cu"], "channels": 8, "l_schedule": [1], "n_radial": 6, "rcut": 4.0}
    pot = random_potential(cfg, seed=2, gain=0.5, dtype="float64")
    model = pot.model
    path = tmp_path / "f.extxyz"
    ase.io.write(path, emt_frames(2, seed=8), format="extxyz")
    batch = collate([to_graph(f, {"Cu": 0}, 4.0) for f in read_frames(path)])
    fc = FitConfig(energy_weight=0.0, force_weight=1.0, virial_weight=1.0)
    params = dict(model.named_parameters())
    name = next(n for n in params if "radial_embedding" in n and params[n].dim() == 2)
    p = params[name]
    p.requires_grad_(True)
    loss, *_ = loss_terms(predict(model, batch, torch.float64, True), batch, fc)
    (grad,) = torch.autograd.grad(loss, p)
    idx = (0, 1)
    h = 1e-5
    with torch.no_grad():
        p[idx] += h
    lp = float(loss_terms(predict(model, batch, torch.float64, False), batch, fc)[0].detach())
    with torch.no_grad():
        p[idx] -= 2 * h
    lm = float(loss_terms(predict(model, batch, torch.float64, False), batch, fc)[0].detach())
    fd = (lp - lm) / (2 * h)
    assert abs(float(grad[idx])) > 1e-6
    assert float(grad[idx]) == pytest.approx(fd, rel=1e-5, abs=1e-9)


def test_fit_reduces_validation_loss_and_writes_model(cu_xyz, tmp_path):
    out = tmp_path / "cu.mdband"
    res = mdband.fit(cu_xyz, out, epochs=6, model=TINY, **FAST)
    assert res.n_train == 12 and res.n_val == 4
    first, last = res.history[0]["val"], res.history[-1]["val"]
    assert last["loss"] < 0.5 * first["loss"]
    assert last["force_rmse"] < 0.7 * first["force_rmse"]
    assert res.metrics.force_rmse == pytest.approx(last["force_rmse"], rel=1e-6)
    # per-element shift fitted by least squares is stored in out_bias
    pot = mdband.load_model(out, dtype="float64")
    assert pot.type_map == ["Cu"]
    assert float(pot.model.out_bias[0, 0, 0]) == pytest.approx(res.energy_shift["Cu"], abs=1e-12)
    assert -1.0 < res.energy_shift["Cu"] < 1.0  # EMT Cu energies are ~0 eV/atom
    a = ase.io.read(cu_xyz, index=0)
    r = pot.evaluate(a.positions, a.cell.array, True, a.get_chemical_symbols())
    r2 = res.potential.evaluate(a.positions, a.cell.array, True, a.get_chemical_symbols())
    assert r.energy == pytest.approx(r2.energy, abs=1e-10)
    assert pot.metadata["source"] == "mdband fit"
    assert pot.metadata["fit"]["validation"]["force_rmse"] == pytest.approx(res.metrics.force_rmse)
    assert out.with_name("cu.mdband.ckpt").exists()


def test_resume_continues_bit_for_bit(cu_xyz, tmp_path, monkeypatch):
    full = mdband.fit(cu_xyz, tmp_path / "full.mdband", epochs=4, model=TINY, **FAST)
    part = tmp_path / "part.mdband"
    import mdband.fit.train as train

    real, calls = train.evaluate_metrics, []

    def stop_in_epoch_3(*args, **kw):  # initial, epoch 1, epoch 2, then "killed"
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(train, "evaluate_metrics", stop_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        mdband.fit(cu_xyz, part, epochs=4, model=TINY, checkpoint_every=1, **FAST)
    monkeypatch.setattr(train, "evaluate_metrics", real)
    assert not part.exists() and part.with_name("part.mdband.ckpt").exists()
    with pytest.raises(OutputExistsError, match="resume"):
        mdband.fit(cu_xyz, part, epochs=4, model=TINY, **FAST)
    with pytest.raises(CheckpointMismatchError, match="lr"):
        mdband.fit(cu_xyz, part, epochs=4, model=TINY, resume=True, **{**FAST, "lr": 1e-3})
    res = mdband.fit(cu_xyz, part, epochs=4, model=TINY, resume=True, **FAST)
    assert res.resumed_from_epoch == 2
    sd_a = full.potential.model.state_dict()
    sd_b = res.potential.model.state_dict()
    for k in sd_a:
        torch.testing.assert_close(sd_a[k], sd_b[k], rtol=0, atol=1e-12)
    assert [h["epoch"] for h in res.history] == [0, 1, 2, 3, 4]
    assert res.metrics.loss == pytest.approx(full.metrics.loss, rel=1e-9)
    with pytest.raises(CheckpointMismatchError, match="already finished"):
        mdband.fit(cu_xyz, part, epochs=4, model=TINY, resume=True, **FAST)


def test_finetune_keeps_type_map_and_refits_shift(tmp_path):
    data = tmp_path / "cuni.extxyz"
    ase.io.write(data, emt_frames(8, seed=3, symbols=("Cu", "Ni"), reps=(2, 1, 1)), format="extxyz")
    base = tmp_path / "base.mdband"
    mdband.fit(data, base, epochs=4, model=TINY, type_map=["Ni", "Cu", "Ag"], **FAST)
    pot0 = mdband.load_model(base, dtype="float64")
    assert pot0.type_map == ["Ni", "Cu", "Ag"]
    out = tmp_path / "ft.mdband"
    res = mdband.fit(data, out, init=base, epochs=2, **{**FAST, "lr": 2e-4})
    pot = mdband.load_model(out, dtype="float64")
    assert pot.type_map == ["Ni", "Cu", "Ag"] and pot.config == pot0.config
    assert pot.metadata["fit"]["init_model_hash"] == pot0.model_hash
    # without refit_shift the offsets are untouched
    torch.testing.assert_close(pot.model.out_bias, pot0.model.out_bias)
    assert res.history[-1]["val"]["loss"] < res.history[0]["val"]["loss"]
    # refit: a constant offset in the data is absorbed by the shift before training
    shifted = ase.io.read(data, index=":")
    for a in shifted:
        a.calc.results["energy"] += 0.5 * len(a)
    ase.io.write(tmp_path / "shifted.extxyz", shifted, format="extxyz")
    res2 = mdband.fit(
        tmp_path / "shifted.extxyz", None, init=out, epochs=1, refit_shift=True, **FAST
    )
    # the 500 meV/atom offset is absorbed by the refitted shift before training starts
    assert res2.initial_metrics.energy_rmse < 150.0
    assert res2.energy_shift["Ni"] + res2.energy_shift["Cu"] == pytest.approx(1.0, abs=0.3)


def test_unknown_element_and_bad_settings(tmp_path, cu_xyz):
    base = tmp_path / "cu.mdband"
    mdband.fit(cu_xyz, base, epochs=1, model=TINY, **FAST)
    ni = tmp_path / "ni.extxyz"
    ase.io.write(ni, emt_frames(2, seed=4, symbols=("Ni",)), format="extxyz")
    with pytest.raises(UnknownElementError, match="Ni"):
        mdband.fit(ni, tmp_path / "x.mdband", init=base, epochs=1, **FAST)
    with pytest.raises(UnknownElementError):
        mdband.fit(ni, None, type_map=["Cu"], epochs=1, model=TINY, **FAST)
    with pytest.raises(OutputExistsError, match="overwrite"):
        mdband.fit(cu_xyz, base, epochs=1, model=TINY, **FAST)
    with pytest.raises(FitConfigError, match="epochs"):
        mdband.fit(cu_xyz, None, epochs=0)
    with pytest.raises(FitConfigError, match="lr"):
        mdband.fit(cu_xyz, None, lr=-1.0)
    with pytest.raises(FitConfigError, match="unknown fit setting"):
        mdband.fit(cu_xyz, None, learning_rate=1e-3)
    with pytest.raises(FitConfigError, match="unknown model option"):
        mdband.fit(cu_xyz, None, model={"chanels": 8})
    with pytest.raises(FitConfigError, match="rcut"):
        mdband.fit(cu_xyz, None, model={"rcut": -1.0})
    with pytest.raises(FitConfigError, match="from scratch"):
        mdband.fit(cu_xyz, None, init=base, model=TINY)
    with pytest.raises(DatasetError, match="empty"):
        mdband.fit([], None)
    with pytest.raises(FitConfigError, match="resume"):
        mdband.fit(cu_xyz, tmp_path / "new.mdband", resume=True)


def test_training_runs_on_the_torch_path_whatever_the_kernel_setting(cu_xyz, tmp_path, monkeypatch):
    """The force loss needs a differentiable backward: fit trains on the torch path even when
    MDBAND_KERNELS asks for the fused ops (whose closed-form backward ops are not), and the
    returned potential uses the engine settings of the environment."""
    kw = dict(epochs=1, model=TINY, **FAST)
    ref = mdband.fit(cu_xyz, tmp_path / "a.mdband", **kw)
    monkeypatch.setenv("MDBAND_KERNELS", "ops")
    got = mdband.fit(cu_xyz, tmp_path / "b.mdband", **kw)
    assert got.history[-1]["train_loss"] == ref.history[-1]["train_loss"]
    assert got.metrics.force_rmse == ref.metrics.force_rmse
    assert got.potential.model.settings.kernels == "ops"


def test_finetuning_a_dens_model_is_refused():
    from pathlib import Path

    from mdband.errors import ModelFileError
    from mdband.fit.config import FitConfig
    from mdband.fit.start import start_model

    dens = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd" / "dens.pt"
    with pytest.raises(ModelFileError, match="dens model"):
        start_model(FitConfig(init=str(dens)), None, [])
