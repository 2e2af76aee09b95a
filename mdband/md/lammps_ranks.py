"""How the MPI ranks of ``mdband run --engine lammps`` act as one.

Rank 0 reads, checks and writes; the other ranks wait for its answer. An exception on rank 0
is raised on every rank (so none is left waiting in a collective call), and an exception that
every rank raises at the same point is marked so :func:`mdband.md.lammps_engine.run_lammps`
does not abort the MPI job for it.
"""

from __future__ import annotations

import os
from typing import TypeVar

from mdband.errors import MdbandError

_E = TypeVar("_E", bound=BaseException)


def launcher_rank_size() -> tuple[int, int]:
    """Return ``(rank, size)`` of this process as set by ``mpirun`` (MPICH, Open MPI).

    ``(0, 1)`` outside a launcher. Read from the environment, so it costs no MPI start-up.
    """
    for rank_var, size_var in (
        ("PMI_RANK", "PMI_SIZE"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ):
        rank, size = os.environ.get(rank_var), os.environ.get(size_var)
        if rank is not None and size is not None:
            try:
                return int(rank), int(size)
            except ValueError:
                continue
    return 0, 1


def all_ranks(exc: _E) -> _E:
    """Mark ``exc`` as raised on every rank at the same point (no rank is left waiting)."""
    try:
        exc.all_ranks = True  # type: ignore[attr-defined]  # a marker on the exception
    except AttributeError:
        pass
    return exc


def serial_ase(fn, *args):
    """Call ``fn`` with ASE's MPI world set to one process.

    Once mpi4py is imported, ASE's readers broadcast from rank 0 to all ranks, which would
    deadlock a rank-0-only call.
    """
    import ase.parallel

    world = ase.parallel.world
    old = world.__dict__.get("comm")
    world.comm = ase.parallel.DummyMPI()
    try:
        return fn(*args)
    finally:
        world.comm = old


class RemoteError(MdbandError):
    """The error another rank (rank 0) hit; this rank stops with the same message."""


def on_root(comm, fn):
    """Run ``fn`` on rank 0, broadcast its result; an exception there is raised on all ranks."""
    result = error = None
    if comm.rank == 0:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - every rank must learn that it failed
            error = exc
    message = comm.bcast(None if error is None else one_line(error), root=0)
    if message is not None:
        if comm.rank == 0:
            raise all_ranks(error)
        raise all_ranks(RemoteError(message))
    return comm.bcast(result, root=0)


def one_line(exc: BaseException) -> str:
    """Return the message of ``exc`` on one line (its type name when empty)."""
    return " ".join(str(exc).split()) or type(exc).__name__
