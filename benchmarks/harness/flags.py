"""The command-line flags the benchmarks share: one spelling, one meaning, one help text.

``parser(name, doc, device="cuda", repeat=5, ...)`` is an ``argparse.ArgumentParser`` with
``--out`` and the shared flags given a default (a flag not named is not offered); a script
adds its own flags to it. ``shared(name, ...)`` is the same set as a parent parser for
sub-commands (``add_parser(..., parents=[shared(...)])``). The shared flags:

========== ===========================================================================
``--device``   where mdband runs: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (CUDA when
               torch sees one)
``--dtype``    ``float32`` or ``float64``
``--repeat``   timed calls of each measurement (median reported)
``--warmup``   untimed calls before them (compilation, graph capture, caches)
``--threads``  torch CPU threads (one number or, where a script compares them, several)
``--sizes``    diamond cells of 8·n³ atoms (``--size``: one)
``--configs``  model configs (:mod:`benchmarks.harness.models`: default, mini)
``--tiny``     the tiny model: a CPU smoke run of a GPU script
``--out``      append the results to this file as JSON lines (default: ``$OUT/NAME.jsonl``
               when the environment sets ``OUT``, the device machine's output folder)

``name`` is the script's module under ``benchmarks`` (``vs_deepmd``, ``experiments.gpu_warps``).
========== ===========================================================================
"""

from __future__ import annotations

import argparse
import os
import re

#: model configs ``--configs`` offers (see :mod:`benchmarks.harness.models`)
CONFIG_CHOICES = ("default", "mini", "neo", "plus")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def device(text: str) -> str:
    """A ``--device`` value: ``cpu``, ``cuda``, ``cuda:N``, or ``auto`` (resolved here)."""
    if text == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if not _DEVICE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected cpu, cuda, cuda:N or auto")
    return text


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: expected a whole number of at least 1")
    return value


def _not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}: expected a whole number of at least 0")
    return value


#: help text of each shared flag (the default is appended)
HELP = {
    "device": "cpu, cuda, cuda:N or auto",
    "dtype": "mdband's floating-point type",
    "repeat": "timed calls per measurement (median reported)",
    "warmup": "untimed calls before the timed ones",
    "threads": "torch CPU threads",
    "sizes": "diamond cells of 8·n³ atoms",
    "size": "diamond cell of 8·n³ atoms",
    "configs": "model configs (deepmd-kit's default DPA4, DPA4-Mini, the Neo and Plus grades)",
    "tiny": "a tiny model (8 channels, lmax 1): a CPU smoke run",
}


def _add(ap: argparse.ArgumentParser, key: str, default) -> None:
    """Add the shared flag ``key`` with ``default``."""
    if key not in HELP:
        raise ValueError(f"no shared flag {key!r}; shared: {', '.join(HELP)}")
    many = isinstance(default, (list, tuple))
    kwargs = {"default": list(default) if many else default, "help": HELP[key] + "  [%(default)s]"}
    if key == "tiny":
        kwargs.update(action="store_true", default=bool(default), help=HELP[key])
    elif key == "device":
        kwargs["type"] = device
    elif key == "dtype":
        kwargs["choices"] = ("float32", "float64")
    elif key == "configs":
        kwargs.update(nargs="+", choices=CONFIG_CHOICES)
    elif key == "warmup":
        kwargs["type"] = _not_negative
    else:  # repeat, threads, sizes, size: whole numbers, several where the default is a list
        kwargs["type"] = _positive
        if many:
            kwargs["nargs"] = "*" if key == "sizes" else "+"
    ap.add_argument("--" + key, **kwargs)


def shared(name: str, out: bool = True, **defaults) -> argparse.ArgumentParser:
    """A parent parser (no ``-h``) with ``--out`` (unless ``out`` is False: a parser whose
    sub-commands have it) and the shared flags given in ``defaults`` (flag name without
    dashes → default)."""
    ap = argparse.ArgumentParser(add_help=False)
    for key, default in defaults.items():
        _add(ap, key, default)
    if not out:
        return ap
    out = os.environ.get("OUT")
    stem = name.rsplit(".", 1)[-1]  # experiments.gpu_warps: gpu_warps.jsonl
    ap.add_argument(
        "--out",
        default=os.path.join(out, f"{stem}.jsonl") if out else None,
        metavar="FILE.jsonl",
        help="append the results here as JSON lines  [%(default)s]",
    )
    return ap


def parser(name: str, doc: str | None, out: bool = True, **defaults) -> argparse.ArgumentParser:
    """The parser of benchmark ``name``: its docstring ``doc`` as description (first line) and
    epilog (the rest), ``--out`` (unless ``out`` is False) and the shared flags given in
    ``defaults``."""
    first, _, rest = (doc or name).strip().partition("\n")
    return argparse.ArgumentParser(
        prog=f"python -m benchmarks.{name}",
        description=first,
        epilog=rest.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[shared(name, out, **defaults)],
    )
