"""The Python half of ``pair_style mdband``: what the C++ plugin calls.

``pair_coeff * * [El...]`` calls :func:`create` once per rank; every force evaluation calls
:meth:`LammpsModel.compute` with the rank's edge list (centre = local atom, neighbour = local or
ghost atom, ``edge_vec = x[src] − x[dst]`` within the model cutoff) as zero-copy buffers.

Forces are returned for local **and** ghost atoms (the plugin sends ghost forces to their owners
through LAMMPS), the virial of the rank's edges (it sums to the total over ranks) and, when
asked, per-atom energies (local atoms) and per-atom virials (local + ghost atoms, nine columns
in LAMMPS' centroid order: deepmd-kit's partition, :mod:`mdband.atom_virial`). Everything here
is in eV and Å; the plugin converts from and to the input's unit style.

On a single rank every ghost is a periodic image of a local atom. The bridge then asks LAMMPS
once per call for each ghost's owner (one forward communication of the row indices), maps ghost
neighbours to their owners and evaluates the local atoms only, like ``Potential.evaluate``: no
per-layer exchange, no features computed for ghosts, and on CUDA the step replays from a CUDA
graph (:mod:`mdband.step_graph`). Ghost rows of the force and per-atom virial buffers stay zero.
Several ranks use the per-layer exchange.
"""

from __future__ import annotations

from mdband.errors import MdbandError
from mdband.lammps.model import (  # noqa: F401  (the plugin's and the tests' names)
    _CACHE,
    _VOIGT_A,
    _VOIGT_B,
    LammpsModel,
    _configure_threads,
    load_potential,
    select_device,
)


def create(model_file, elements, options: dict | None = None) -> LammpsModel:
    """Create this rank's model; called by ``pair_coeff * * [El...]`` on every rank.

    ``elements``: the element of each LAMMPS type, or empty (``pair_coeff * *``): LAMMPS type
    ``t`` is then the first model's type ``t − 1``, as ``pair_style deepmd`` maps them
    (``options["ntypes"]`` LAMMPS types; more than the type map has is an error, fewer a
    warning, as deepmd-kit warns).

    ``model_file`` is one path, or a list of paths for a committee (``pair_style mdband a.pt
    b.pt ...``: see :mod:`mdband.lammps.committee`). ``options``: ``dtype``, ``device``,
    ``head`` (and for a committee ``out_file``, ``out_freq``, ``atomic``, ``mode``) from the
    ``pair_style`` line and ``rank``, ``nprocs``, ``local_rank``, ``local_size`` (ranks on this
    node), ``step``, ``ntypes``, ``restart`` and ``restart_rows`` from the plugin.
    """
    opts = dict(options or {})
    device = select_device(str(opts.get("device", "auto")), int(opts.get("local_rank", 0)))
    _configure_threads(int(opts.get("local_size", 1)))
    dtype = str(opts.get("dtype", "float32"))
    head = opts.get("head") or None
    files = [model_file] if isinstance(model_file, str) else list(model_file)
    pots = [load_potential(f, device, dtype, head) for f in files]
    for f, pot in zip(files, pots):
        if pot.spin is not None:
            raise MdbandError(
                f"pair_style mdband: {f} is a {pot.spin.scheme} spin model, which needs "
                "per-atom magnetic moments; LAMMPS atom_style spin is not supported (use the "
                "ASE calculator or mdband run)"
            )
    names, note, warning = type_elements(pots[0], elements, int(opts.get("ntypes", len(elements))))
    if len(pots) == 1:
        made = LammpsModel(pots[0], pots[0].types_of(names), opts)
    else:
        types = []
        for k, pot in enumerate(pots):
            try:
                types.append(pot.types_of(names))
            except MdbandError as exc:
                raise MdbandError(f"committee model {k + 1} ({files[k]}): {exc}") from None
        from mdband.lammps.committee import CommitteeModel

        made = CommitteeModel(pots, types, opts)
    made.type_note, made.type_warning = note, warning
    return made


def type_elements(potential, elements, ntypes: int) -> tuple[list[str], str, str]:
    """Return the element of each LAMMPS type, a log line and a warning (or "").

    For ``pair_coeff * * El...`` (``elements`` given) or ``pair_coeff * *`` (empty: the type
    map's first ``ntypes``).
    """
    names = [str(e) for e in elements]
    type_map = list(potential.type_map)
    if names:
        return names, f"LAMMPS types 1..{len(names)} are {' '.join(names)}", ""
    if ntypes > len(type_map):
        raise MdbandError(
            f"pair_coeff * * maps LAMMPS types onto the model's type map in order, but this "
            f"input has {ntypes} atom types and the model only {len(type_map)} "
            f"({' '.join(type_map)}); name the element of each type: pair_coeff * * El1 ..."
        )
    names = type_map[:ntypes]
    note = f"pair_coeff * *: LAMMPS types 1..{ntypes} are {' '.join(names)} (the model's order)"
    warning = ""
    if len(type_map) > ntypes:
        warning = (
            f"pair_coeff * * maps the {ntypes} atom types onto the first {ntypes} of the "
            f"model's {len(type_map)} types ({' '.join(names)}); name the elements, e.g. "
            f"pair_coeff * * {' '.join(names)}, if that is not what the data file means"
        )
    return names, note, warning
