"""Models shipped inside the package, loadable as ``builtin:NAME``.

Each built-in model is an mdband model file ``NAME.mdband`` in this folder with its model card
``NAME.md`` beside it (training data, sizes, validation errors, valid range).
"""

from __future__ import annotations

from pathlib import Path

from mdband.errors import ModelFileError

_HERE = Path(__file__).resolve().parent


def builtin_models() -> list[str]:
    """Names of the built-in models (``load_model("builtin:NAME")``)."""
    return sorted(p.stem for p in _HERE.glob("*.mdband"))


def builtin_path(name: str) -> Path:
    """Path of the built-in model ``name``; :class:`ModelFileError` for an unknown name."""
    path = _HERE / f"{name}.mdband"
    if not name or "/" in name or "\\" in name or not path.is_file():
        known = ", ".join(builtin_models()) or "none"
        raise ModelFileError(f"unknown built-in model {name!r} (available: {known})")
    return path


def model_card(name: str) -> str:
    """Return the model card (markdown) of the built-in model ``name`` ("" when it has none)."""
    builtin_path(name)
    card = _HERE / f"{name}.md"
    return card.read_text(encoding="utf-8") if card.is_file() else ""
