"""Where a model is written, and in which format: mdband's own file or a deepmd-kit checkpoint.

mdband's own model files end in ``.mdband``; ``.pt`` is deepmd-kit's name for a training
checkpoint, so an output named ``.pt`` is a real deepmd-kit checkpoint
(:mod:`mdband.io.deepmd_export`) or nothing: never mdband's format under deepmd-kit's name.
"""

from __future__ import annotations

from pathlib import Path

from mdband.errors import ModelFileError

MDBAND_SUFFIX = ".mdband"
DEEPMD_SUFFIX = ".pt"
MODEL_FORMATS = ("mdband", "deepmd")
_DEEPMD_NAMES = (".pt", ".pth", ".pt2")  # training checkpoint, TorchScript, AOTInductor


def output_model_format(path, fmt: str | None = None) -> str:
    """Return the model format, ``"mdband"`` or ``"deepmd"``, of an output named ``path``.

    ``fmt`` when given, else from the name; :class:`ModelFileError` with the reason when name
    and format disagree.
    """
    suffix = Path(path).suffix.lower()
    if fmt is None:
        if suffix == MDBAND_SUFFIX:
            return "mdband"
        if suffix == DEEPMD_SUFFIX:
            return "deepmd"
        raise ModelFileError(
            f"cannot tell the model format from the name {path}: name it *.mdband (mdband's "
            "model file) or *.pt (deepmd-kit checkpoint), or give the format"
        )
    if fmt not in MODEL_FORMATS:
        raise ModelFileError(f"model format {fmt!r} is not one of {', '.join(MODEL_FORMATS)}")
    if fmt == "mdband" and suffix != MDBAND_SUFFIX:
        raise ModelFileError(
            f"mdband model files end in {MDBAND_SUFFIX}; {path} is not such a name"
            + (" (.pt is deepmd-kit's checkpoint name)" if suffix in _DEEPMD_NAMES else "")
        )
    if fmt == "deepmd" and suffix != DEEPMD_SUFFIX:
        raise ModelFileError(f"a deepmd-kit training checkpoint is named *.pt; {path} is not")
    return fmt


def check_mdband_name(path) -> None:
    """Refuse to write mdband's format under one of deepmd-kit's names (.pt, .pth, .pt2)."""
    if Path(path).suffix.lower() in _DEEPMD_NAMES:
        raise ModelFileError(
            f"{path}: {Path(path).suffix} is deepmd-kit's name; mdband model files end in "
            f"{MDBAND_SUFFIX} (a deepmd-kit checkpoint is written by Potential.save_deepmd or "
            "`mdband convert MODEL OUT.pt --to deepmd`)"
        )


def write_model(potential, path, fmt: str | None = None, *, precision: str | None = None):
    """Write ``potential`` to ``path`` in ``fmt`` (see :func:`output_model_format`)."""
    fmt = output_model_format(path, fmt)
    if fmt == "deepmd":
        potential.save_deepmd(path, precision=precision)
    else:
        potential.save(path)
    return fmt
