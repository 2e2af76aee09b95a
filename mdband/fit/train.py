"""The training loop of ``mdband fit``: AdamW on the loss of :mod:`mdband.fit.loss`.

It keeps an EMA of the weights and writes checkpoints.

The learning rate warms up linearly over ``warmup`` of the steps and then follows a cosine down
to ``lr · lr_final_ratio``. The weights validated, checkpointed as "ema" and written to the
output are an exponential moving average of the trained ones (``ema_decay``; 0 disables it).
The fit is one function, :func:`fit`, over the rooms of :mod:`mdband.fit`: data
(:mod:`~mdband.fit.data`), the starting model (:mod:`~mdband.fit.start`), the loss
(:mod:`~mdband.fit.loss`), checkpoints (:mod:`~mdband.fit.checkpoint`) and what it shows
(:mod:`~mdband.fit.report`).
"""

from __future__ import annotations

import copy
import datetime as _dt
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mdband import host_memory
from mdband.errors import MdbandError, UnknownElementError
from mdband.fit.checkpoint import (
    check_resume,
    claim_outputs,
    cpu_copy,
    data_fingerprint,
    read_checkpoint,
    save_checkpoint,
)
from mdband.fit.config import FitConfig, FitConfigError
from mdband.fit.data import DatasetError, elements_of, read_dataset, split_indices, to_graph
from mdband.fit.loss import (
    Metrics,
    batches,
    evaluate_metrics,  # looked up here at each call (a test replaces it)
    loss_terms,
    metrics_dict,
    metrics_from,
    predict,
)
from mdband.fit.report import Reporter, format_metrics
from mdband.fit.start import energy_shift, start_model
from mdband.io.files import start_new_file
from mdband.io.model_output import write_model
from mdband.potential import Potential, resolve_device
from mdband.settings import EngineSettings

__all__ = ["FitResult", "TrainingDivergedError", "fit", "lr_at"]


class TrainingDivergedError(MdbandError):
    """The loss became NaN or infinite."""


@dataclass
class FitResult:
    """What :func:`fit` returns."""

    potential: Potential
    output: Path | None
    metrics: Metrics | None
    initial_metrics: Metrics | None
    history: list[dict] = field(default_factory=list)
    n_train: int = 0
    n_val: int = 0
    energy_shift: dict = field(default_factory=dict)
    elapsed: float = 0.0
    resumed_from_epoch: int = 0


# ---------------------------------------------------------------------------- optimisation
def lr_at(step: int, total: int, cfg: FitConfig) -> float:
    """Learning rate of optimiser step ``step`` of ``total``: linear warm-up, then cosine."""
    warm = max(1, int(round(cfg.warmup * total))) if cfg.warmup > 0 else 0
    if step < warm:
        return cfg.lr * (step + 1) / warm
    span = max(1, total - warm)
    frac = min(1.0, (step - warm) / span)
    low = cfg.lr * cfg.lr_final_ratio
    return low + (cfg.lr - low) * 0.5 * (1.0 + math.cos(math.pi * frac))


class _EMA:
    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.decay = decay
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}

    def update(self, model, step: int) -> None:
        if self.decay <= 0:
            return
        d = min(self.decay, (1.0 + step) / (10.0 + step))
        with torch.no_grad():
            for n, p in model.named_parameters():
                self.shadow[n].mul_(d).add_(p.detach(), alpha=1.0 - d)

    def swap(self, model) -> None:
        """Exchange the model's parameters with the averaged ones (call twice to undo)."""
        if self.decay <= 0:
            return
        with torch.no_grad():
            for n, p in model.named_parameters():
                tmp = p.detach().clone()
                p.copy_(self.shadow[n])
                self.shadow[n].copy_(tmp)


def _train_epoch(model, opt, ema, train, epoch, step, total_steps, cfg, dtype, device, rep):
    """One pass over ``train`` in the epoch's seeded order; returns (step, lr, mean loss)."""
    order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train)).tolist()
    run_loss, n_seen = 0.0, 0
    lr = 0.0
    for batch in batches(train, order, cfg.batch_size):
        batch = batch.to(device)
        lr = lr_at(step, total_steps, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        pred = predict(model, batch, dtype, create_graph=True)
        total, le, lf, lv = loss_terms(pred, batch, cfg)
        if not torch.isfinite(total):
            raise TrainingDivergedError(
                f"loss became {float(total)} at epoch {epoch}, step {step}; lower the learning rate"
            )
        opt.zero_grad(set_to_none=True)
        total.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        ema.update(model, step)
        run_loss += float(total.detach()) * batch.n_frames
        n_seen += batch.n_frames
        rmse_f = 1e3 * math.sqrt(float(lf.detach()))
        rep.step(
            epoch,
            cfg.epochs,
            f"loss {run_loss / n_seen:.3g} F {rmse_f:.0f} meV/Å lr {lr:.2g}",
        )
    return step, lr, run_loss / max(n_seen, 1)


# ---------------------------------------------------------------------------- entry point
def fit(
    data=None,
    output=None,
    *,
    init=None,
    config=None,
    progress: bool = False,
    console=None,
    **settings,
) -> FitResult:
    """Train a SeZM model from scratch or fine-tune one.

    The result is written (with ``output``) as an mdband model file or a deepmd-kit checkpoint.

    Parameters
    ----------
    data : path or list of paths
        Anything :func:`mdband.io.systems.read_systems` reads: deepmd-kit systems (npy,
        npy/mixed, hdf5, raw), LAMMPS dumps (with ``type_map``), VASP outputs, extxyz and other
        ASE files, ASE databases (``data_format`` names the format when needed).
    output : path, optional
        Model to write (atomically): ``NAME.mdband`` (mdband's file) or ``NAME.pt`` (a
        deepmd-kit 3.2 training checkpoint; ``format`` overrides the name); None keeps the
        result in memory only.
    init : str, optional
        Model to fine-tune (deepmd-kit checkpoint, mdband file or ``builtin:NAME``); its type
        map and architecture are kept.
    config : FitConfig, dict or path of a TOML file, optional
        Settings; ``settings`` keyword arguments (FitConfig fields) override them.
    progress : bool
        Show a rich progress bar and per-epoch lines.

    Returns
    -------
    FitResult
        The trained :class:`~mdband.potential.Potential` (float64), validation metrics before
        and after training and the per-epoch history.

    Raises
    ------
    FitConfigError, DatasetError, UnknownElementError, ModelFileError, OutputExistsError
    """
    if data is not None:
        settings["data"] = [str(data)] if isinstance(data, (str, Path)) else list(data)
    if output is not None:
        settings["output"] = str(output)
    if init is not None:
        settings["init"] = str(init)
    cfg = _resolve_config(config, settings)
    if not cfg.data:
        raise DatasetError("the dataset is empty: no data paths given")
    with claim_outputs(cfg):
        return _fit(cfg, progress, console)


def _fit(cfg: FitConfig, progress: bool, console) -> FitResult:
    t0 = time.perf_counter()
    ck = read_checkpoint(cfg.checkpoint_path) if cfg.resume else None
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    host_memory.apply(EngineSettings.resolve().host_memory, device)  # CPU training: no refaults
    dtype = torch.float32 if cfg.dtype == "float32" else torch.float64

    # a resumed or fine-tuned model's type map also names the data's numbered types (dp train)
    start = start_model(cfg, ck, None) if (ck is not None or cfg.init is not None) else None
    frames = read_dataset(
        cfg.data,
        cfg.data_format,
        cfg.type_map,
        default_type_map=None if start is None else start.type_map,
        energy_key=cfg.energy_key,
        forces_key=cfg.forces_key,
        virial_key=cfg.virial_key,
    )
    if cfg.max_frames is not None and len(frames) > cfg.max_frames:
        keep = np.random.default_rng(cfg.seed).choice(len(frames), cfg.max_frames, replace=False)
        frames = [frames[i] for i in sorted(keep.tolist())]
    fingerprint = data_fingerprint(frames)
    if ck is not None:
        check_resume(ck, cfg, fingerprint)

    # ---- model and data split
    start = start or start_model(cfg, ck, frames)
    kind, type_map, model_cfg, model = start.kind, start.type_map, start.config, start.model
    missing = [e for e in elements_of(frames) if e not in type_map]
    if missing:
        raise UnknownElementError(missing, list(type_map))
    cutoff = float(model_cfg["rcut"])
    tindex = {s: i for i, s in enumerate(type_map)}
    graphs = [to_graph(f, tindex, cutoff) for f in frames]
    if ck is not None:
        train_idx, val_idx = list(ck["train_idx"]), list(ck["val_idx"])
    else:
        train_idx, val_idx = split_indices(len(graphs), cfg.val_fraction, cfg.seed)
    if not train_idx:
        raise FitConfigError("no training frames left after the validation split")
    train = [graphs[i] for i in train_idx]
    val = [graphs[i] for i in val_idx]

    model = model.to(device=device, dtype=dtype).train()
    for p in model.parameters():
        p.requires_grad_(True)
    shift = energy_shift(model, cfg, ck, train, len(type_map), dtype, device)

    # ---- optimiser
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total_steps = steps_per_epoch * cfg.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    ema = _EMA(model, cfg.ema_decay)
    history: list[dict] = []
    start_epoch, step = 0, 0
    initial = None
    if ck is not None:
        opt.load_state_dict(ck["optimizer"])
        if cfg.ema_decay > 0:
            ema.shadow = {k: v.to(device=device, dtype=dtype) for k, v in ck["ema"].items()}
        start_epoch, step = int(ck["epoch"]), int(ck["step"])
        history = list(ck["history"])
        initial = metrics_from(ck.get("initial_metrics"))
    else:
        initial = evaluate_metrics(model, val, cfg, dtype, device)
        history.append(
            {"epoch": 0, "step": 0, "lr": 0.0, "train_loss": None, "val": metrics_dict(initial)}
        )

    log = Path(cfg.log) if cfg.log else None
    if log is not None and ck is None:  # a new file: an old one or a link there is replaced
        start_new_file(log, overwrite=True, what="log")
    rep = Reporter(progress, console, log, total_steps, step)
    try:
        if ck is None:
            rep.line(
                f"mdband fit: {len(train)} training / {len(val)} validation frames, "
                f"types {' '.join(type_map)}, {sum(p.numel() for p in model.parameters()):,} "
                f"parameters, {total_steps} steps"
            )
            rep.line(f"epoch 0: {format_metrics(initial)}")
        else:
            rep.line(f"resuming from {cfg.checkpoint_path} after epoch {start_epoch}")
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            t_ep = time.perf_counter()
            step, lr, train_loss = _train_epoch(
                model, opt, ema, train, epoch, step, total_steps, cfg, dtype, device, rep
            )
            ema.swap(model)
            m = evaluate_metrics(model, val, cfg, dtype, device)
            ema.swap(model)
            rec = {
                "epoch": epoch,
                "step": step,
                "lr": lr,
                "train_loss": train_loss,
                "val": metrics_dict(m),
                "seconds": time.perf_counter() - t_ep,
            }
            history.append(rec)
            rep.line(f"epoch {epoch}: train loss {rec['train_loss']:.4g}  {format_metrics(m)}")
            last = epoch == cfg.epochs
            if (cfg.output is not None or cfg.checkpoint is not None) and (
                epoch % cfg.checkpoint_every == 0 or last
            ):
                state = {
                    "epoch": epoch,
                    "step": step,
                    "kind": kind,
                    "type_map": list(type_map),
                    "model_config": model_cfg,
                    "model_state": cpu_copy(model.state_dict()),
                    "ema": cpu_copy(ema.shadow) if cfg.ema_decay > 0 else {},
                    "optimizer": opt.state_dict(),
                    "data_fingerprint": fingerprint,
                    "train_idx": list(train_idx),
                    "val_idx": list(val_idx),
                    "energy_shift": [float(x) for x in shift],
                    "history": history,
                    "initial_metrics": metrics_dict(initial),
                    "init_meta": start.init_meta,
                }
                save_checkpoint(cfg.checkpoint_path, state, cfg)
    finally:
        rep.close()

    # ---- final model (averaged weights, float64)
    ema.swap(model)
    pot, final = _final_potential(model, start, cutoff, shift, cfg, train, val)
    out = None
    if cfg.output is not None:
        out = Path(cfg.output)
        write_model(pot, out, cfg.format)
    return FitResult(
        potential=pot,
        output=out,
        metrics=final,
        initial_metrics=initial,
        history=history,
        n_train=len(train),
        n_val=len(val),
        energy_shift={s: float(x) for s, x in zip(type_map, shift)},
        elapsed=time.perf_counter() - t0,
        resumed_from_epoch=int(ck["epoch"]) if ck is not None else 0,
    )


def _final_potential(model, start, cutoff, shift, cfg, train, val):
    """Return the trained weights as a float64 CPU :class:`Potential` and its validation metrics."""
    from mdband.model.factory import build_sezm

    # the returned potential runs with the default engine settings (fused ops on CUDA)
    final_model = build_sezm(start.config, copy.deepcopy(model).state_dict(), None)
    final_model = final_model.to(device="cpu", dtype=torch.float64).eval()
    final = evaluate_metrics(final_model, val, cfg, torch.float64, torch.device("cpu"))
    meta = {
        "source": "mdband fit",
        "fit": {
            "data": [Path(p).name for p in cfg.data],
            "n_train": len(train),
            "n_val": len(val),
            "epochs": cfg.epochs,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "energy_shift": {s: float(x) for s, x in zip(start.type_map, shift)},
            "validation": metrics_dict(final),
            **start.init_meta,
        },
    }
    pot = Potential(
        final_model,
        kind=start.kind,
        type_map=list(start.type_map),
        cutoff=cutoff,
        config=start.config,
        metadata=meta,
        device="cpu",
        dtype="float64",
    )
    return pot, final


def _resolve_config(config, settings: dict) -> FitConfig:
    if config is None:
        return FitConfig.from_mapping(settings)
    if isinstance(config, FitConfig):
        d = config.to_dict()
        d.update({k.replace("-", "_"): v for k, v in settings.items()})
        return FitConfig.from_mapping(d)
    if isinstance(config, dict):
        d = dict(config)
        d.update(settings)
        return FitConfig.from_mapping(d)
    return FitConfig.from_toml(config, settings)
