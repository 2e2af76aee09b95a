"""The training loop of ``mdband fit``: energy + force (+ virial) loss, AdamW, EMA, checkpoints.

Loss of a batch of ``B`` frames (eV, Å)::

    L = w_E · mean_b ((E_b − E_b^ref) / N_b)²
      + w_F · mean_{atoms, xyz} (F − F^ref)²
      + w_W · mean_{b with virial} mean_{ij} ((W_b − W_b^ref)_{ij} / N_b)²

Forces and virials come from ``g = ∂E/∂edge_vec`` exactly as in :class:`mdband.Potential`, with
``create_graph=True`` so the loss is differentiated through them. The learning rate warms up
linearly over ``warmup`` of the steps and then follows a cosine down to ``lr · lr_final_ratio``.
The weights validated, checkpointed as "ema" and written to the output are an exponential
moving average of the trained ones (``ema_decay``; 0 disables it).
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np
import torch

from mdband.errors import MdbandError, ModelFileError, UnknownElementError
from mdband.fit.config import FitConfig, FitConfigError
from mdband.fit.data import (
    Batch,
    DatasetError,
    GraphFrame,
    collate,
    elements_of,
    fit_energy_shift,
    read_dataset,
    split_indices,
    to_graph,
)
from mdband.io.atomic import atomic_path
from mdband.potential import Potential, resolve_device

CHECKPOINT_FORMAT = "mdband-fit-checkpoint"
CHECKPOINT_VERSION = 1

#: engine settings of the model being trained: the torch path everywhere, whose backward is
#: differentiable again (the force loss needs ∂²E/∂r∂w); the fused ops' closed-form backward ops
#: are not, and the fused SO(2) layers give no weight gradients
TRAIN_OPTIONS = {"kernels": "torch", "recompute": "off"}

# settings a resumed run must share with the checkpoint (the rest may change, e.g. epochs)
_RUN_DEFINING = (
    "init",
    "head",
    "model",
    "type_map",
    "batch_size",
    "lr",
    "lr_final_ratio",
    "warmup",
    "weight_decay",
    "grad_clip",
    "ema_decay",
    "energy_weight",
    "force_weight",
    "virial_weight",
    "val_fraction",
    "seed",
    "init_seed",
    "init_gain",
    "refit_shift",
    "max_frames",
    "dtype",
)


class OutputExistsError(FitConfigError):
    """The output or checkpoint file exists and neither ``overwrite`` nor ``resume`` is set."""


class CheckpointMismatchError(FitConfigError):
    """``resume`` was asked with a checkpoint from a different run (data or settings)."""


class TrainingDivergedError(MdbandError):
    """The loss became NaN or infinite."""


@dataclass
class Metrics:
    """Validation errors: energy per atom (meV/atom), force components (meV/Å)."""

    loss: float
    energy_rmse: float
    energy_mae: float
    force_rmse: float
    force_mae: float
    virial_rmse: float | None
    n_frames: int
    n_atoms: int

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


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


# ---------------------------------------------------------------------------- model physics
def predict(model, batch: Batch, dtype: torch.dtype, create_graph: bool):
    """Frame energies (B,), forces (N, 3) and virials (B, 3, 3), float64."""
    ev = batch.edge_vec.to(dtype).detach().requires_grad_(True)
    atom_e = model(batch.types, batch.src, batch.dst, ev).to(torch.float64)
    energy = atom_e.new_zeros(batch.n_frames).index_add(0, batch.atom_frame, atom_e)
    (g,) = torch.autograd.grad(energy.sum(), ev, create_graph=create_graph, allow_unused=True)
    if g is None:
        g = torch.zeros_like(ev)
    g = g.to(torch.float64)
    n = batch.types.shape[0]
    forces = g.new_zeros(n, 3).index_add(0, batch.dst, g).index_add(0, batch.src, -g)
    outer = (g[:, :, None] * ev.detach().to(torch.float64)[:, None, :]).reshape(-1, 9)
    virial = -g.new_zeros(batch.n_frames, 9).index_add(0, batch.edge_frame, outer)
    return energy, forces, virial.reshape(-1, 3, 3)


def loss_terms(pred, batch: Batch, cfg: FitConfig):
    energy, forces, virial = pred
    le = (((energy - batch.energy) / batch.n_atoms) ** 2).mean()
    lf = ((forces - batch.forces) ** 2).mean()
    total = cfg.energy_weight * le + cfg.force_weight * lf
    lv = None
    if cfg.virial_weight > 0 and bool(batch.has_virial.any()):
        m = batch.has_virial
        dv = (virial[m] - batch.virial[m]) / batch.n_atoms[m][:, None, None]
        lv = (dv**2).mean()
        total = total + cfg.virial_weight * lv
    return total, le, lf, lv


# ---------------------------------------------------------------------------- helpers
def lr_at(step: int, total: int, cfg: FitConfig) -> float:
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


def _batches(frames: list[GraphFrame], order, batch_size: int):
    for i in range(0, len(order), batch_size):
        yield collate([frames[j] for j in order[i : i + batch_size]])


def evaluate_metrics(model, frames, cfg: FitConfig, dtype, device) -> Metrics | None:
    """Validation loss and errors (no parameter gradients)."""
    if not frames:
        return None
    sq_e = ab_e = sq_f = ab_f = sq_v = 0.0
    n_f = n_v = 0
    loss = 0.0
    for batch in _batches(frames, list(range(len(frames))), cfg.batch_size):
        batch = batch.to(device)
        pred = predict(model, batch, dtype, create_graph=False)
        total, *_ = loss_terms(pred, batch, cfg)
        loss += float(total.detach()) * batch.n_frames
        energy, forces, virial = (t.detach() for t in pred)
        de = (energy - batch.energy) / batch.n_atoms
        sq_e += float((de**2).sum())
        ab_e += float(de.abs().sum())
        df = forces - batch.forces
        sq_f += float((df**2).sum())
        ab_f += float(df.abs().sum())
        n_f += df.numel()
        m = batch.has_virial
        if bool(m.any()):
            dv = (virial[m] - batch.virial[m]) / batch.n_atoms[m][:, None, None]
            sq_v += float((dv**2).sum())
            n_v += dv.numel()
    n = len(frames)
    return Metrics(
        loss=loss / n,
        energy_rmse=1e3 * math.sqrt(sq_e / n),
        energy_mae=1e3 * ab_e / n,
        force_rmse=1e3 * math.sqrt(sq_f / n_f),
        force_mae=1e3 * ab_f / n_f,
        virial_rmse=1e3 * math.sqrt(sq_v / n_v) if n_v else None,
        n_frames=n,
        n_atoms=sum(f.n_atoms for f in frames),
    )


def _atom_energy_sums(model, frames, dtype, device) -> np.ndarray:
    out = []
    with torch.no_grad():
        for f in frames:
            e = model(
                f.types.to(device), f.src.to(device), f.dst.to(device), f.edge_vec.to(device, dtype)
            )
            out.append(float(e.to(torch.float64).sum()))
    return np.array(out)


def _zero_output_layer(model) -> None:
    """Start a new model at "energy = per-element shift, forces = 0"."""
    out = getattr(getattr(model, "fitting_net", None), "filter_layers", None)
    if out is not None:
        with torch.no_grad():
            out.networks[0].output_layer.matrix.zero_()


def _set_shift(model, shift: np.ndarray) -> None:
    """Add ``shift`` (per type, eV) to the model's ``out_bias``."""
    if not hasattr(model, "out_bias"):
        raise FitConfigError("this model kind has no per-element energy shift (out_bias)")
    with torch.no_grad():
        model.out_bias[0, :, 0] += torch.as_tensor(shift, dtype=model.out_bias.dtype)


def _data_fingerprint(frames) -> str:
    h = hashlib.sha256()
    for f in frames:
        h.update(" ".join(f.species).encode())
        h.update(np.ascontiguousarray(f.positions, dtype=np.float64).tobytes())
        h.update(np.float64(f.energy).tobytes())
    return h.hexdigest()


def _atomic_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _read_checkpoint(path: Path) -> dict:
    if not path.is_file():
        raise FitConfigError(f"--resume: checkpoint {path} does not exist")
    try:
        ck = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FitConfigError(f"cannot read checkpoint {path}: {first[:160]}") from None
    if not isinstance(ck, dict) or ck.get("format") != CHECKPOINT_FORMAT:
        raise FitConfigError(f"{path} is not an mdband fit checkpoint")
    if ck.get("format_version", 0) > CHECKPOINT_VERSION:
        raise FitConfigError(f"{path}: checkpoint format is newer than this mdband")
    return ck


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


def _check_outputs(cfg: FitConfig) -> None:
    if cfg.output is not None:
        out = Path(cfg.output)
        if out.is_dir():
            raise OutputExistsError(f"output {out} is a directory")
        if not out.parent.exists():
            raise FitConfigError(f"output directory {out.parent} does not exist")
        if out.exists() and not (cfg.overwrite or cfg.resume):
            raise OutputExistsError(f"output {out} exists (use --overwrite to replace it)")
    if cfg.output is not None or cfg.checkpoint is not None:
        ck = cfg.checkpoint_path
        if not ck.parent.exists():
            raise FitConfigError(f"checkpoint directory {ck.parent} does not exist")
        if ck.exists() and not (cfg.overwrite or cfg.resume):
            raise OutputExistsError(
                f"checkpoint {ck} exists (use --resume to continue or --overwrite to restart)"
            )
    if cfg.resume and cfg.output is None and cfg.checkpoint is None:
        raise FitConfigError("--resume needs an output or a checkpoint file")


# ---------------------------------------------------------------------------- reporting
class _Reporter:
    """Rich progress bar with the running losses; per-epoch lines to a log file."""

    def __init__(self, enabled: bool, console, log, total_steps: int, first_step: int) -> None:
        self.enabled = enabled
        self.console = console
        self.log = log
        self.progress = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[losses]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.progress.add_task(
                "fit", total=total_steps, completed=first_step, losses=""
            )
            self.progress.start()

    def line(self, text: str) -> None:
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(text + "\n")
        if self.progress is not None:
            self.progress.console.print(text, highlight=False)

    def step(self, epoch: int, epochs: int, losses: str) -> None:
        if self.progress is not None:
            self.progress.update(
                self.task, advance=1, description=f"epoch {epoch}/{epochs}", losses=losses
            )

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()


def _fmt_metrics(m: Metrics | None) -> str:
    if m is None:
        return "no validation frames"
    s = f"val loss {m.loss:.4g}  E {m.energy_rmse:.3g} meV/atom  F {m.force_rmse:.4g} meV/Å (RMSE)"
    return s if m.virial_rmse is None else s + f"  W {m.virial_rmse:.3g} meV/atom"


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
    """Train a SeZM model from scratch or fine-tune one; write an mdband model file.

    Parameters
    ----------
    data : path or list of paths
        extxyz / any ASE-readable file, an ASE database (``.db``) or deepmd npy system(s).
    output : path, optional
        mdband model file to write (atomically); None keeps the result in memory only.
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
    _check_outputs(cfg)
    t0 = time.perf_counter()
    ck = _read_checkpoint(cfg.checkpoint_path) if cfg.resume else None
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    dtype = torch.float32 if cfg.dtype == "float32" else torch.float64

    frames = read_dataset(
        cfg.data, energy_key=cfg.energy_key, forces_key=cfg.forces_key, virial_key=cfg.virial_key
    )
    if cfg.max_frames is not None and len(frames) > cfg.max_frames:
        keep = np.random.default_rng(cfg.seed).choice(len(frames), cfg.max_frames, replace=False)
        frames = [frames[i] for i in sorted(keep.tolist())]
    fingerprint = _data_fingerprint(frames)
    if ck is not None:
        _check_resume(ck, cfg, fingerprint)

    # ---- model
    init_meta = {}
    if ck is not None:
        from mdband.model.factory import build_sezm

        kind, type_map, model_cfg = ck["kind"], list(ck["type_map"]), dict(ck["model_config"])
        if kind != "sezm":
            raise FitConfigError(f"cannot resume a model of kind {kind!r}")
        model = build_sezm(model_cfg, None, TRAIN_OPTIONS)
        init_meta = dict(ck.get("init_meta", {}))
    elif cfg.init is not None:
        from mdband.loader import load_model

        pot0 = load_model(cfg.init, device="cpu", dtype="float64", head=cfg.head)
        if pot0.kind != "sezm":
            raise ModelFileError(f"{cfg.init}: only SeZM models can be fine-tuned")
        from mdband.model.factory import build_sezm

        kind, type_map, model_cfg = pot0.kind, pot0.type_map, pot0.config
        model = build_sezm(model_cfg, pot0.model.state_dict(), TRAIN_OPTIONS)
        init_meta = {"init": str(cfg.init), "init_model_hash": pot0.model_hash}
    else:
        from mdband.model.factory import build_sezm, initialise_weights

        kind = "sezm"
        type_map = list(cfg.type_map) if cfg.type_map is not None else elements_of(frames)
        model_cfg = cfg.model_config(type_map)
        model = build_sezm(model_cfg, None, TRAIN_OPTIONS)
        seed = cfg.seed if cfg.init_seed is None else cfg.init_seed
        initialise_weights(model, seed, cfg.init_gain)
        _zero_output_layer(model)
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

    # ---- energy shift
    shift = np.zeros(len(type_map))
    if ck is not None:
        model.load_state_dict(ck["model_state"], strict=True)  # copy_ keeps buffer dtypes
        shift = np.asarray(ck["energy_shift"], dtype=np.float64)
    elif cfg.init is None or cfg.refit_shift:
        if cfg.init is None:
            with torch.no_grad():
                model.out_bias.zero_()
                model.fitting_net.bias_atom_e.zero_()
        counts = np.stack([g.counts for g in train])
        e_ref = np.array([g.energy for g in train])
        e_now = _atom_energy_sums(model, train, dtype, device)
        shift = fit_energy_shift(counts, e_ref - e_now)
        _set_shift(model, shift)

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
        initial = _metrics_from(ck.get("initial_metrics"))
    else:
        initial = evaluate_metrics(model, val, cfg, dtype, device)
        history.append({"epoch": 0, "step": 0, "lr": 0.0, "train_loss": None, "val": _d(initial)})

    log = Path(cfg.log) if cfg.log else None
    if log is not None and ck is None:
        log.write_text("")
    rep = _Reporter(progress, console, log, total_steps, step)
    try:
        if ck is None:
            rep.line(
                f"mdband fit: {len(train)} training / {len(val)} validation frames, "
                f"types {' '.join(type_map)}, {sum(p.numel() for p in model.parameters()):,} "
                f"parameters, {total_steps} steps"
            )
            rep.line(f"epoch 0: {_fmt_metrics(initial)}")
        else:
            rep.line(f"resuming from {cfg.checkpoint_path} after epoch {start_epoch}")
        for epoch in range(start_epoch + 1, cfg.epochs + 1):
            order = np.random.default_rng([cfg.seed, epoch]).permutation(len(train)).tolist()
            run_loss, n_seen = 0.0, 0
            t_ep = time.perf_counter()
            for batch in _batches(train, order, cfg.batch_size):
                batch = batch.to(device)
                lr = lr_at(step, total_steps, cfg)
                for group in opt.param_groups:
                    group["lr"] = lr
                pred = predict(model, batch, dtype, create_graph=True)
                total, le, lf, lv = loss_terms(pred, batch, cfg)
                if not torch.isfinite(total):
                    raise TrainingDivergedError(
                        f"loss became {float(total)} at epoch {epoch}, step {step}; "
                        "lower the learning rate"
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
            ema.swap(model)
            m = evaluate_metrics(model, val, cfg, dtype, device)
            ema.swap(model)
            rec = {
                "epoch": epoch,
                "step": step,
                "lr": lr,
                "train_loss": run_loss / max(n_seen, 1),
                "val": _d(m),
                "seconds": time.perf_counter() - t_ep,
            }
            history.append(rec)
            rep.line(f"epoch {epoch}: train loss {rec['train_loss']:.4g}  {_fmt_metrics(m)}")
            last = epoch == cfg.epochs
            if (cfg.output is not None or cfg.checkpoint is not None) and (
                epoch % cfg.checkpoint_every == 0 or last
            ):
                _atomic_save(
                    {
                        "format": CHECKPOINT_FORMAT,
                        "format_version": CHECKPOINT_VERSION,
                        "epoch": epoch,
                        "step": step,
                        "kind": kind,
                        "type_map": list(type_map),
                        "model_config": model_cfg,
                        "model_state": _cpu(model.state_dict()),
                        "ema": _cpu(ema.shadow) if cfg.ema_decay > 0 else {},
                        "optimizer": opt.state_dict(),
                        "settings": {k: _plain(getattr(cfg, k)) for k in _RUN_DEFINING},
                        "data_fingerprint": fingerprint,
                        "train_idx": list(train_idx),
                        "val_idx": list(val_idx),
                        "energy_shift": [float(x) for x in shift],
                        "history": history,
                        "initial_metrics": _d(initial),
                        "init_meta": init_meta,
                    },
                    cfg.checkpoint_path,
                )
    finally:
        rep.close()

    # ---- final model (averaged weights, float64)
    ema.swap(model)
    # the returned potential runs with the default engine settings (fused ops on CUDA)
    final_model = build_sezm(model_cfg, copy.deepcopy(model).state_dict(), None)
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
            "energy_shift": {s: float(x) for s, x in zip(type_map, shift)},
            "validation": _d(final),
            **init_meta,
        },
    }
    pot = Potential(
        final_model,
        kind=kind,
        type_map=list(type_map),
        cutoff=cutoff,
        config=model_cfg,
        metadata=meta,
        device="cpu",
        dtype="float64",
    )
    out = None
    if cfg.output is not None:
        out = Path(cfg.output)
        pot.save(out)
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


def _check_resume(ck: dict, cfg: FitConfig, fingerprint: str) -> None:
    if ck["data_fingerprint"] != fingerprint:
        raise CheckpointMismatchError(
            f"checkpoint {cfg.checkpoint_path} was written for different training data"
        )
    saved = ck.get("settings", {})
    for key in _RUN_DEFINING:
        if key in saved and saved[key] != _plain(getattr(cfg, key)):
            raise CheckpointMismatchError(
                f"setting {key} differs from the checkpoint ({saved[key]!r} there, "
                f"{getattr(cfg, key)!r} now); start a new run instead"
            )
    if int(ck["epoch"]) >= cfg.epochs:
        raise CheckpointMismatchError(
            f"checkpoint {cfg.checkpoint_path} already finished epoch {ck['epoch']} of "
            f"{cfg.epochs}; raise --epochs to train longer"
        )


def _plain(v):
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _cpu(sd: dict) -> dict:
    return {k: v.detach().cpu().clone() for k, v in sd.items()}


def _d(m: Metrics | None):
    return None if m is None else m.to_dict()


def _metrics_from(d: dict | None) -> Metrics | None:
    return None if d is None else Metrics(**d)
