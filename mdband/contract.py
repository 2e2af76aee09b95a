"""The model contract: what a :class:`~mdband.potential.Potential` reads of the network it wraps.

A model kind's builder (:mod:`mdband.kinds`) returns a ``torch.nn.Module`` that declares every
member of :class:`ModelContract` itself (a class attribute, an attribute set in ``__init__`` or a
property): SeZM (:class:`~mdband.model.energy.SeZMEnergyModel`, its dens, spin and ZBL variants)
and the test potentials (:mod:`mdband.testing.lj`, :mod:`mdband.testing.mp`). The Potential
reads these names and no others, without defaults: :func:`check_model` refuses a network that
lacks one when the Potential is made (:class:`~mdband.errors.ModelContractError`, one line
naming what is missing). The call itself::

    model(types, src, dst, edge_vec, exchange=None, **options) -> (N,) atom energies (eV)

``types`` (N,) int64, ``src``/``dst`` (E,) int64 (``dst`` the centre atom), ``edge_vec`` (E, 3)
Å in :attr:`ModelContract.float64_edges`' dtype. ``exchange`` (a per-layer ghost exchange, as
the LAMMPS bridge gives it on several ranks; :mod:`mdband.lammps.exchange`): a message-passing
model calls ``x = exchange(x)`` on its node features before every layer that reads neighbours'
features, so ghost rows (≥ n_local) hold their owners' values; a model without node features
ignores it. ``options`` are only those the model declares it takes: ``plan`` (a chunked model,
:attr:`~ModelContract.chunking`), ``energy_rows`` (:attr:`~ModelContract.accepts_energy_rows`),
``csr_pair`` (:attr:`~ModelContract.accepts_edge_csr`), ``magmoms`` (a native spin model,
:attr:`~ModelContract.spin`) and ``charge_spin`` with ``systems`` (a charge/spin model,
:attr:`~ModelContract.charge_spin_inputs`).

The model file's ``kind``, ``type_map`` and ``cutoff`` are the Potential's (read from the file),
not the network's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

import torch

from mdband.errors import ModelContractError

if TYPE_CHECKING:
    from mdband.charge_spin import ChargeSpinInputs
    from mdband.config import SpinConfig
    from mdband.settings import EngineSettings
    from mdband.so3.storage import RotationLayout

#: LAMMPS communication width (doubles per atom in one call) of models that set no other
DEFAULT_EXCHANGE_WIDTH = 128


@runtime_checkable
class Chunking(Protocol):
    """A model that evaluates in chunks of destination atoms under the memory budget.

    SeZM: :class:`~mdband.model.block.SeZMDescriptor`; see :mod:`mdband.model.chunking`.
    """

    #: chunks of destination atoms the last forward used (1: unchunked)
    last_chunks: int

    def would_chunk(self, n_atoms: int, n_edges: int, like: torch.Tensor) -> bool:
        """Whether an evaluation of this size (``like``: its dtype and device) runs in chunks."""
        ...

    def shrink_chunks(self, device: torch.device, n_atoms: int) -> bool:
        """After running out of memory: halve the chunks' edges (False: nothing left to cut)."""
        ...

    def memory_budget_text(self, device: torch.device) -> str:
        """Return one line: the ``memory_budget`` setting and what it resolves to on ``device``."""
        ...


@runtime_checkable
class DirectForceModel(Protocol):
    """A model whose forces come out of the network instead of the gradient of its energy.

    This is deepmd-kit's dens mode (:attr:`ModelContract.direct_forces`):
    :meth:`energies_and_forces` replaces the forward plus autograd, and there is no virial
    (NaN, as deepmd-kit gives it).
    """

    def energies_and_forces(
        self, types, src, dst, edge_vec, exchange=None, plan=None, csr_pair=None, **options
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Atom energies (N,) and forces (N, 3), float64, of an edge list (no autograd)."""
        ...


@runtime_checkable
class ModelContract(Protocol):
    """What every model kind's network declares (see the module docstring for the call)."""

    #: the engine settings it was built with (None: a kind without them, e.g. the test
    #: potentials; the Potential then resolves ``neighbour_list`` and ``host_memory`` itself)
    settings: EngineSettings | None
    #: rotation storage it uses (None: it stores no rotations) and why, one line ("" if none)
    rotation_layout: RotationLayout | None
    rotation_layout_reason: str
    #: a spin model's scheme and magnetic types (None: no spin; :mod:`mdband.spin`)
    spin: SpinConfig | None
    #: what it takes of a system's total charge and spin multiplicity (None: nothing; else its
    #: forward takes ``charge_spin`` and ``systems``: :mod:`mdband.charge_spin`)
    charge_spin_inputs: ChargeSpinInputs | None
    #: forces from the network, no virial: then it is a :class:`DirectForceModel`
    direct_forces: bool
    #: wants its edge vectors in float64 whatever its own dtype (else in its dtype)
    float64_edges: bool
    #: edges with r ≥ cutoff contribute exactly zero (energy and gradient), so an edge list may
    #: be padded with such edges: CUDA-graph replay (:mod:`mdband.step_graph`)
    zero_beyond_cutoff: bool
    #: takes ``energy_rows``: the caller differentiates the sum of the first rows' energies
    accepts_energy_rows: bool
    #: takes ``csr_pair``, the (dst, src) CSRs of the edges, where its settings run fused ops
    accepts_edge_csr: bool
    #: doubles per atom one LAMMPS communication call moves in a per-layer ghost exchange
    #: (wider node features are sent in several calls; :data:`DEFAULT_EXCHANGE_WIDTH`)
    exchange_width: int
    #: how it evaluates in chunks under the memory budget (None: never chunked)
    chunking: Chunking | None

    def __call__(self, types, src, dst, edge_vec, exchange=None, **options) -> torch.Tensor:
        """Atom energies (N,); see the module docstring."""
        ...


#: the data members every model declares (the call is checked as ``torch.nn.Module``)
MEMBERS = tuple(ModelContract.__annotations__)
#: what a model's ``chunking`` declares
CHUNKING = ("last_chunks", "would_chunk", "shrink_chunks", "memory_budget_text")


def check_model(model, kind: str) -> ModelContract:
    """Return ``model`` if it satisfies :class:`ModelContract`, else raise.

    The error is a :class:`~mdband.errors.ModelContractError` naming the kind and every missing
    member (a :class:`DirectForceModel`'s ``energies_and_forces`` and a :class:`Chunking`'s
    members included).
    """
    if not isinstance(model, torch.nn.Module):
        raise ModelContractError(kind, [f"torch.nn.Module (it built a {type(model).__name__})"])
    missing = [name for name in MEMBERS if not hasattr(model, name)]
    if not missing and model.direct_forces and not isinstance(model, DirectForceModel):
        missing.append("energies_and_forces (direct_forces is true)")
    if not missing and model.chunking is not None:
        missing = [f"chunking.{n}" for n in CHUNKING if not hasattr(model.chunking, n)]
    if missing:
        raise ModelContractError(kind, missing)
    return cast(ModelContract, model)  # its members checked above
