"""One rank's model as ``pair_style mdband`` sees it, and helpers of the plugin's entry points.

:class:`LammpsModel` is the model; the device, thread and model-cache helpers are those the
plugin's entry points use (see :mod:`mdband.lammps.bridge`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from mdband.atom_virial import atom_virials, lammps_order
from mdband.errors import MdbandError
from mdband.lammps.exchange import Backend, GhostExchange, lammps_backend
from mdband.potential import Potential

_CACHE: dict[tuple, Potential] = {}

#: pairs closer than this (Å²) are left out, as the plugin and :mod:`mdband.graph` do
COINCIDENT_R2 = 1e-10

# LAMMPS' order of the six virial components
_VOIGT_A = [0, 1, 2, 0, 0, 1]
_VOIGT_B = [0, 1, 2, 1, 2, 2]


def select_device(device: str, local_rank: int = 0) -> torch.device:
    """``cpu``; ``cuda``/``auto`` → GPU ``local_rank % n_gpus`` (``auto`` falls back to CPU)."""
    device = (device or "auto").strip()
    if device == "cpu":
        return torch.device("cpu")
    if device.startswith("cuda:"):
        dev = torch.device(device)
    elif device in ("cuda", "auto"):
        if not torch.cuda.is_available():
            if device == "cuda":
                raise MdbandError("device cuda requested, but CUDA is not available")
            return torch.device("cpu")
        dev = torch.device("cuda", int(local_rank) % torch.cuda.device_count())
    else:
        raise MdbandError(f"unknown device {device!r}; use cpu, cuda, cuda:N or auto")
    if not torch.cuda.is_available():
        raise MdbandError(f"device {device} requested, but CUDA is not available")
    torch.cuda.set_device(dev)
    return dev


def _configure_threads(local_size: int) -> None:
    """Share the node's cores between the ranks on it (unless the user chose a thread count)."""
    if "MDBAND_NUM_THREADS" in os.environ:
        n = int(os.environ["MDBAND_NUM_THREADS"])
    elif "OMP_NUM_THREADS" in os.environ:
        return
    else:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
        n = max(1, cores // max(1, int(local_size)))
    torch.set_num_threads(max(1, n))


def _number(text):
    """Read a ``pair_style`` value.

    None when not given (None or ""), else a number when the text is one (the charge/spin
    checks then say what is wrong with it), else the text itself.
    """
    if text is None or text == "":
        return None
    if isinstance(text, str):
        try:
            return float(text)
        except ValueError:
            return text
    return text


def load_potential(model_file: str, device: torch.device, dtype: str, head: str | None):
    """``load_model`` with a per-process cache (``pair_coeff`` may be issued several times)."""
    from mdband.loader import load_model

    path = Path(model_file)
    stat = path.stat() if path.is_file() else None
    key = (str(path.resolve()), stat and (stat.st_mtime_ns, stat.st_size), str(device), dtype, head)
    if key not in _CACHE:
        _CACHE[key] = load_model(model_file, device=device, dtype=dtype, head=head)
    return _CACHE[key]


class LammpsModel:
    """One rank's model as ``pair_style mdband`` sees it.

    Attributes read by the plugin: ``cutoff`` (Å) and ``exchange_width`` (doubles per atom moved
    by one LAMMPS communication call; wider features are sent in several calls). The plugin sets
    ``lammps_handle`` before the first :meth:`compute`. ``options`` ``charge`` and ``spin``
    (``pair_style mdband ... charge Q spin S``; numbers or their text, "" when not given) are the
    system's total charge and spin multiplicity for a charge/spin model, resolved here once
    (:meth:`Potential.charge_spin_of`: the model's defaults, a typed error when one is missing
    or the model takes none).
    """

    def __init__(
        self,
        potential: Potential,
        lammps_types: np.ndarray,
        options: dict | None = None,
        backend: Backend | None = None,
    ) -> None:
        if potential.direct_forces:
            raise MdbandError(
                "pair_style mdband: this is a dens model (direct forces and no virial, "
                "deepmd-kit's dens mode); LAMMPS runs energy models"
            )
        self.potential = potential
        self.cutoff = float(potential.cutoff)
        self.device_name = str(potential.device)
        self.exchange_width = potential.exchange_width
        self.options = dict(options or {})
        #: the charge/spin input of every evaluation (None: the model takes none)
        self.charge_spin = potential.charge_spin_of(
            *(_number(self.options.get(k)) for k in ("charge", "spin"))
        )
        #: the plugin's log line of the charge/spin in use ("": the model takes none)
        self.charge_spin_text = (
            ""
            if self.charge_spin is None
            else "total charge {}, spin multiplicity {}".format(*self.charge_spin.tolist()[0])
        )
        self.lammps_handle = None
        self._backend = backend  # stands in for LAMMPS' communication in tests
        # model type of each LAMMPS type (LAMMPS types start at 1)
        lut = np.concatenate([[0], np.asarray(lammps_types, dtype=np.int64)])
        self._lut = torch.as_tensor(lut, device=potential.device)
        self._lut_np = lut
        self.last_exchange_calls = 0
        self.last_path = ""  # "owners" (one rank) or "exchange", for tests and logs
        #: (3, 3) −Σ g ⊗ vec of the rank's edges in the last compute
        self.last_virial: np.ndarray | None = None
        self._list = None  # compute_listed: (n_all, rows, owners, centres) of LAMMPS' list
        self.list_copies = 0  # neighbour lists taken by compute_listed
        self.announce = True  # print which path a single rank takes
        self.type_note = ""  # how pair_coeff mapped the types (logged by the plugin)
        self.type_warning = ""  # a LAMMPS warning about that mapping, or ""

    @property
    def single_rank(self) -> bool:
        """True when LAMMPS runs this model on one rank (``nprocs`` from the plugin)."""
        return int(self.options.get("nprocs", 0)) == 1

    def _backend_now(self) -> Backend | None:
        if self._backend is not None:
            return self._backend
        if self.lammps_handle is None:
            return None
        return lammps_backend(self.lammps_handle)

    def owners(self, n_all: int, n_local: int) -> np.ndarray | None:
        """Return the local owner index of every row (``owner[i] == i`` for local atoms).

        Found by one forward communication of the row indices; None without LAMMPS or if a
        ghost's owner is not local (then the per-layer exchange is used).
        """
        backend = self._backend_now()
        if backend is None:
            return None
        rows = np.arange(n_all, dtype=np.float64).reshape(n_all, 1)
        if n_all > n_local:
            backend(rows, False)
        owner = rows[:, 0].astype(np.int64)
        if not np.array_equal(owner[:n_local], np.arange(n_local)):
            return None
        if n_all > n_local and (owner[n_local:].min() < 0 or owner[n_local:].max() >= n_local):
            return None
        return owner

    def exchange_for(self, n_all: int, n_local: int) -> GhostExchange | None:
        """Return one evaluation's ``exchange`` (None outside LAMMPS without a test backend)."""
        if self._backend is not None:
            return GhostExchange(self._backend, n_all, n_local)
        if self.lammps_handle is None:
            return None
        return GhostExchange(lammps_backend(self.lammps_handle), n_all, n_local)

    def compute(self, nlocal, nghost, types, src, dst, vec, forces, eatom, vatom, out) -> None:
        """Evaluate one rank's edges; results are written into the plugin's buffers.

        ``types`` int32 (n_all,) LAMMPS types; ``src``/``dst`` int64 (E,); ``vec`` float64
        (E, 3) Å; ``forces`` float64 (n_all, 3), zeroed; ``eatom`` float64 (nlocal,) or None;
        ``vatom`` float64 (n_all, 9) or None: per-atom virials in LAMMPS' centroid order
        ``xx yy zz xy xz yz yx zx zy`` (:func:`mdband.atom_virial.lammps_order`); ``out``
        float64 (7,): energy of the local atoms, then the virial xx yy zz xy xz yz (eV).
        """
        n_all = nlocal + nghost
        ltypes = np.frombuffer(types, dtype=np.int32).astype(np.int64)
        src_np = np.frombuffer(src, dtype=np.int64)
        dst_np = np.frombuffer(dst, dtype=np.int64)
        vec_np = np.frombuffer(vec, dtype=np.float64).reshape(-1, 3)
        owner = self.owners(n_all, nlocal) if self.single_rank else None
        if owner is not None:
            if self.last_path != "owners" and self.announce:
                print(
                    "pair_style mdband: one rank, ghost atoms mapped to their owners; "
                    f"CUDA graphs {self.potential.cuda_graphs}",
                    flush=True,
                )
            self.last_path = "owners"
            self.last_exchange_calls = 1 if n_all > nlocal else 0
            f, e_local, w6, va, w33 = self._compute_owned(
                self._lut_np[ltypes[:nlocal]], owner[src_np], dst_np, vec_np, vatom is not None
            )
        else:
            self.last_path = "exchange"
            f, e_local, w6, va, w33 = self._compute_exchange(
                nlocal, n_all, ltypes, src_np, dst_np, vec_np, vatom is not None
            )
        self._write(n_all, f, e_local, w6, va, w33, forces, eatom, vatom, out)

    def _write(self, n_all, f, e_local, w6, va, w33, forces, eatom, vatom, out) -> None:
        """Results into the plugin's buffers (rows beyond f's stay as they were: zero)."""
        self.last_virial = w33.cpu().numpy()
        head = torch.cat([e_local.sum().reshape(1), w6])
        np.frombuffer(out, dtype=np.float64)[:] = head.cpu().numpy()
        fv = np.frombuffer(forces, dtype=np.float64).reshape(n_all, 3)
        fv[: f.shape[0]] = f.cpu().numpy()
        if eatom is not None:
            np.frombuffer(eatom, dtype=np.float64)[:] = e_local.cpu().numpy()
        if vatom is not None:
            vv = np.frombuffer(vatom, dtype=np.float64).reshape(n_all, 9)
            vv[: va.shape[0]] = va.cpu().numpy()

    def compute_listed(self, nlocal, nghost, types, x, src, dst, forces, eatom, vatom, out):
        """Evaluate one step from the positions ``x`` of local and ghost atoms.

        ``x`` is float64 (n_all, 3). LAMMPS' full neighbour list (``src``/``dst`` int64 (E,),
        skin pairs included) comes only on steps where LAMMPS rebuilt it (None otherwise:
        between builds atoms keep their rows).

        The plugin takes this path with one model (committees use :meth:`compute`). The pairs
        stay on the model's device, on one rank with each neighbour's owner; every step the
        positions are copied over, the edge vectors formed there and the pairs within the
        cutoff selected (as the plugin does on the host for :meth:`compute`), then evaluated
        as :meth:`compute` does (owners on one rank, the per-layer exchange on several).
        Buffers as for :meth:`compute`.
        """
        n_all = nlocal + nghost
        x_np = np.frombuffer(x, dtype=np.float64).reshape(n_all, 3)
        if src is not None:
            self._list = self._take_list(nlocal, n_all, src, dst)
            self.list_copies += 1
        elif self._list is None or self._list[0] != n_all:
            raise MdbandError("pair_style mdband: no neighbour list from LAMMPS yet")
        _, rows, owner_src, dst_t = self._list
        dev = self.potential.device
        x_t = torch.tensor(x_np, device=dev)  # the plugin's view is read-only: a copy
        vec = x_t.index_select(0, rows) - x_t.index_select(0, dst_t)
        keep = torch.nonzero(self._within_cutoff(vec))[:, 0]  # one count back to the host
        ltypes = np.frombuffer(types, dtype=np.int32).astype(np.int64)
        per_atom_virial = vatom is not None
        if owner_src is None:  # several ranks (or no owner map): the per-layer exchange
            self.last_path = "exchange"
            f, e_local, w6, va, w33 = self._compute_exchange(
                nlocal, n_all, ltypes, rows[keep], dst_t[keep], vec[keep], per_atom_virial
            )
        else:
            self.last_path = "owners"
            self.last_exchange_calls = 0
            f, e_local, w6, va, w33 = self._compute_owned(
                self._lut_np[ltypes[:nlocal]],
                owner_src[keep],
                dst_t[keep],
                vec[keep],
                per_atom_virial,
            )
        self._write(n_all, f, e_local, w6, va, w33, forces, eatom, vatom, out)

    def _within_cutoff(self, vec: torch.Tensor) -> torch.Tensor:
        """Pairs the evaluation keeps: 0 < r² (above the plugin's coincidence bound) < rc²."""
        r2 = (vec * vec).sum(1)
        return (r2 < self.cutoff * self.cutoff) & (r2 > COINCIDENT_R2)

    def _take_list(self, nlocal, n_all, src, dst):
        """Take a new LAMMPS list onto the device.

        Returns (n_all, neighbour rows, their owners (None without an owner map), centres), as
        device tensors; the owners come from one forward communication.
        """
        dev = self.potential.device
        src_np = np.frombuffer(src, dtype=np.int64)
        rows = torch.from_numpy(src_np.copy()).to(dev)
        dst_t = torch.from_numpy(np.frombuffer(dst, dtype=np.int64).copy()).to(dev)
        owner = self.owners(n_all, nlocal) if self.single_rank else None
        if owner is not None and self.last_path != "owners" and self.announce:
            print("pair_style mdband: one rank, LAMMPS' neighbour list kept on "
                  f"{self.device_name} between its builds, ghost atoms mapped to their owners; "
                  f"CUDA graphs {self.potential.cuda_graphs}", flush=True)  # fmt: skip
        owner_src = None if owner is None else torch.from_numpy(owner[src_np]).to(dev)
        return n_all, rows, owner_src, dst_t

    def _compute_exchange(self, nlocal, n_all, ltypes, src, dst, vec, per_atom_virial):
        """Local + ghost atoms as nodes, ghost features refreshed by the per-layer exchange."""
        pot = self.potential
        dev = pot.device
        types_t = self._lut[torch.from_numpy(ltypes).to(dev)]
        src_t, dst_t, vec_t = (torch.as_tensor(a, device=dev) for a in (src, dst, vec))
        exchange = self.exchange_for(n_all, nlocal)
        res = pot.evaluate_edges(types_t, src_t, dst_t, vec_t, grad=True, exchange=exchange,
                                 n_local=nlocal, charge_spin=self.charge_spin)  # fmt: skip
        self.last_exchange_calls = 0 if exchange is None else exchange.calls
        return self._assemble(res, src_t, dst_t, vec_t, n_all, nlocal, per_atom_virial)

    def _compute_owned(self, types, src, dst, vec, per_atom_virial):
        """Evaluate local atoms only (one rank), neighbours mapped to their owners.

        Without per-atom virials through ``Potential.evaluate_vectors`` (a replayed CUDA graph
        on CUDA).
        """
        pot = self.potential
        n = types.shape[0]
        if not per_atom_virial:
            atom_e, f, virial = pot.evaluate_vectors(types, src, dst, vec, self.charge_spin)
            # virial[a, b] = −Σ g_a vec_b; LAMMPS' component (a, b) is −Σ vec_a g_b
            w6 = virial[_VOIGT_B, _VOIGT_A]
            return f, atom_e, w6, None, virial
        dev = pot.device
        src_t, dst_t, vec_t = (torch.as_tensor(a, device=dev) for a in (src, dst, vec))
        res = pot.evaluate_edges(torch.from_numpy(types).to(dev), src_t, dst_t, vec_t,
                                 charge_spin=self.charge_spin)  # fmt: skip
        return self._assemble(res, src_t, dst_t, vec_t, n, n, per_atom_virial)

    @staticmethod
    def _assemble(res, src_t, dst_t, vec_t, n_rows, nlocal, per_atom_virial):
        """Assemble forces, energies and virials from an edge evaluation.

        Returns forces (n_rows, 3), local atom energies, the six virial components, per-atom
        virials (n_rows, 9; LAMMPS' centroid columns) if asked (else None) and the 3×3 virial
        −Σ g ⊗ vec, float64 tensors.
        """
        g = res.edge_grad.to(torch.float64)
        dev = g.device
        f = torch.zeros((n_rows, 3), dtype=torch.float64, device=dev)
        f.index_add_(0, dst_t, g)
        f.index_add_(0, src_t, -g)
        # per-edge virial −vec ⊗ g (the f·r convention LAMMPS uses), in LAMMPS' Voigt order
        w6 = -(vec_t[:, _VOIGT_A] * g[:, _VOIGT_B])
        va = None
        if per_atom_virial:
            va = lammps_order(atom_virials(g, vec_t, src_t, dst_t, n_rows))
        w33 = -(g.T @ vec_t.to(torch.float64))
        return f, res.atom_energy[:nlocal], w6.sum(0), va, w33
