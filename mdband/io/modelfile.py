"""mdband's own model file: versioned, self-describing, loadable without deepmd-kit.

The file is a ``torch.save`` dict (read back with ``weights_only=True``)::

    {"format": "mdband-model", "format_version": 1, "kind": "sezm",
     "type_map": [...], "cutoff": 6.0, "config": {...JSON...},
     "state_dict": {name: tensor}, "metadata": {"mdband_version", "model_hash",
     "source_sha256", "source", "created"}, "checksum": "sha256 hex"}

``checksum`` (:func:`content_checksum`) covers everything else in the file: kind, type map,
cutoff, configuration, metadata and every weight's name, dtype, shape and bytes; a file whose
contents do not match it (a flipped bit) is refused as damaged, so the recorded ``model_hash``
belongs to the weights beside it. The checksum is an optional key of format version 1: files
written before it are read as they are (an older mdband ignores it), and their recorded
``model_hash`` is used only where it is re-derived from their weights (see
:func:`mdband.result.verified_hash`), so a damaged weight changes the model's hash.

:func:`parse_model_file` checks the envelope before anything is built: the format version
(an integer), the kind, the type map (distinct names; the configuration's own type map, where
it has one, must be the same), the cutoff (a finite positive number; the configuration's
``rcut``, where it has one, must be the same), a non-empty configuration and the weights
(tensors by name). Each is a one-line :class:`~mdband.errors.ModelFileError`.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from pathlib import Path

import torch

from mdband._version import __version__
from mdband.errors import ModelFileError
from mdband.io.atomic import atomic_path

FORMAT = "mdband-model"
FORMAT_VERSION = 1


def file_sha256(path) -> str:
    """Return the sha256 hex digest of the bytes of file ``path``."""
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


def content_checksum(obj: dict) -> str:
    """Compute the sha256 hex digest of a model file's contents.

    It covers the kind, type map, cutoff, configuration, metadata (canonical JSON) and every
    weight (sorted names; dtype, shape and bytes).
    """
    head = {k: obj.get(k) for k in ("kind", "type_map", "cutoff", "config", "metadata")}
    h = hashlib.sha256(json.dumps(head, sort_keys=True, default=str).encode())
    for key in sorted(obj["state_dict"]):
        t = obj["state_dict"][key].detach().cpu().contiguous()
        h.update(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_model_file(potential, path) -> None:
    """Atomically write ``potential`` to ``path``, with the checksum of its contents.

    The weights keep their stored dtype.
    """
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
    obj["checksum"] = content_checksum(obj)
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def is_model_file(obj: dict) -> bool:
    """Tell whether a loaded torch file ``obj`` is an mdband model file (by its format tag)."""
    return obj.get("format") == FORMAT


def parse_model_file(obj: dict, path) -> dict:
    """Validate a loaded mdband model file (see the module docstring); return it."""
    version = obj.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelFileError(
            f"{path}: mdband model format version {version!r} is not an integer (corrupt file)"
        )
    if version > FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: mdband model format version {version} is newer than this mdband "
            f"({FORMAT_VERSION}); upgrade mdband"
        )
    if version < 1:
        raise ModelFileError(f"{path}: mdband model format version {version} does not exist")
    for key in ("kind", "type_map", "cutoff", "config", "state_dict"):
        if key not in obj:
            raise ModelFileError(f"{path}: mdband model file lacks '{key}' (corrupt)")
    _check_envelope(obj, path)
    if "checksum" in obj and obj["checksum"] != content_checksum(obj):
        raise ModelFileError(
            f"{path} is damaged: its contents do not match its checksum (a changed weight or "
            "setting); use an intact copy"
        )
    return obj


def _check_envelope(obj: dict, path) -> None:
    kind, type_map, cutoff, config = obj["kind"], obj["type_map"], obj["cutoff"], obj["config"]
    if not isinstance(kind, str) or not kind:
        raise ModelFileError(f"{path}: model kind {kind!r} is not a name (corrupt)")
    names = list(type_map) if isinstance(type_map, (list, tuple)) else None
    if not names or not all(isinstance(s, str) and s for s in names):
        raise ModelFileError(f"{path}: type map {type_map!r} is not a list of element names")
    if len(set(names)) != len(names):
        raise ModelFileError(f"{path}: type map {names} names an element twice")
    if isinstance(cutoff, bool) or not isinstance(cutoff, (int, float)):
        raise ModelFileError(f"{path}: cutoff {cutoff!r} is not a number")
    if not (math.isfinite(cutoff) and cutoff > 0):
        raise ModelFileError(f"{path}: cutoff {cutoff!r} Å must be a finite positive length")
    if not isinstance(config, dict) or not config:
        raise ModelFileError(f"{path}: the model configuration is empty (corrupt)")
    own = config.get("type_map")
    if own is not None and list(own) != names:
        raise ModelFileError(
            f"{path}: type map {names} ({len(names)} types) differs from the model "
            f"configuration's {list(own)} ({len(own)} types)"
        )
    rcut = config.get("rcut")
    if isinstance(rcut, (int, float)) and not isinstance(rcut, bool) and rcut != cutoff:
        raise ModelFileError(
            f"{path}: cutoff {cutoff!r} Å differs from the configuration's rcut {rcut!r}"
        )
    sd = obj["state_dict"]
    if not isinstance(sd, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()
    ):
        raise ModelFileError(f"{path}: the weights are not tensors by name (corrupt)")
    if not isinstance(obj.get("metadata", {}), dict):
        raise ModelFileError(f"{path}: the metadata are not a mapping (corrupt)")
