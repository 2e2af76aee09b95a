"""mdband's own model file: versioned, self-describing, loadable without deepmd-kit.

The file is a ``torch.save`` dict (read back with ``weights_only=True``)::

    {"format": "mdband-model", "format_version": 1, "kind": "sezm",
     "type_map": [...], "cutoff": 6.0, "config": {...JSON...},
     "state_dict": {name: tensor}, "metadata": {"mdband_version", "model_hash",
     "source_sha256", "source", "created"}}
"""

from __future__ import annotations

import datetime as _dt
import hashlib
from pathlib import Path

import torch

from mdband._version import __version__
from mdband.errors import ModelFileError
from mdband.io.atomic import atomic_path

FORMAT = "mdband-model"
FORMAT_VERSION = 1


def file_sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_torch_file(path) -> dict:
    """``torch.load(path, weights_only=True)`` with typed errors for missing/corrupt files."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file {path} does not exist")
    if not path.is_file():
        raise ModelFileError(f"model path {path} is not a file")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelFileError(
            f"cannot read model file {path}: corrupt or not a torch file ({first[:120]})"
        ) from None
    if not isinstance(obj, dict):
        raise ModelFileError(f"{path} is not a SeZM checkpoint or mdband model file")
    return obj


def save_model_file(potential, path) -> None:
    """Atomically write ``potential`` (weights in their stored dtype) to ``path``."""
    sd = {k: v.detach().cpu().clone() for k, v in potential.model.state_dict().items()}
    meta = dict(potential.metadata)
    meta.update(
        mdband_version=__version__,
        model_hash=potential.model_hash,
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    )
    obj = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "kind": potential.kind,
        "type_map": list(potential.type_map),
        "cutoff": float(potential.cutoff),
        "config": potential.config,
        "state_dict": sd,
        "metadata": meta,
    }
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def is_model_file(obj: dict) -> bool:
    return obj.get("format") == FORMAT


def parse_model_file(obj: dict, path) -> dict:
    """Validate the envelope of a loaded mdband model file; return it."""
    version = obj.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: mdband model format version {version!r} is newer than this mdband "
            f"({FORMAT_VERSION}); upgrade mdband"
        )
    for key in ("kind", "type_map", "cutoff", "config", "state_dict"):
        if key not in obj:
            raise ModelFileError(f"{path}: mdband model file lacks '{key}' (corrupt)")
    return obj
