"""A model's type indices of chemical symbols or atomic numbers.

This is what ``Potential.types_of`` answers, one lookup per distinct species.
"""

from __future__ import annotations

import numpy as np
import torch
from ase.data import atomic_numbers, chemical_symbols

from mdband.errors import MdbandError, UnknownElementError


class TypeLookup:
    """The type index of each element of ``type_map``.

    Elements are looked up by symbol and, for element symbols, by atomic number.
    """

    def __init__(self, type_map) -> None:
        self.type_map = list(type_map)
        self._znum = {atomic_numbers[s]: i for i, s in enumerate(self.type_map)
                      if s in atomic_numbers}  # fmt: skip
        self._tindex = {s: i for i, s in enumerate(self.type_map)}

    def __call__(self, species) -> np.ndarray:
        """Return the type indices (int64) of ``species`` (chemical symbols or atomic numbers).

        Vectorised; :class:`~mdband.errors.UnknownElementError` names every element the map
        lacks.
        """
        arr = np.asarray(species).reshape(-1)
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        uniq, inverse = np.unique(arr, return_inverse=True)
        lookup = np.empty(len(uniq), dtype=np.int64)
        unknown: list[str] = []
        for k, s in enumerate(uniq):
            if np.issubdtype(uniq.dtype, np.integer):
                z = int(s)
                t = self._znum.get(z)
                name = chemical_symbols[z] if 0 <= z < len(chemical_symbols) else str(z)
            else:
                name = str(s)
                t = self._tindex.get(name)
            if t is None:
                unknown.append(name)
            else:
                lookup[k] = t
        if unknown:
            raise UnknownElementError(unknown, self.type_map)
        return lookup[inverse.reshape(-1)]

    def of_frame(self, species, n_atoms: int) -> np.ndarray:
        """Return the type indices of a frame's ``species`` (a tensor too), one per position.

        :class:`~mdband.errors.MdbandError` when the counts differ.
        """
        if isinstance(species, torch.Tensor):
            species = species.detach().cpu().numpy()
        types = self(species)
        if types.shape[0] != n_atoms:
            raise MdbandError(f"{n_atoms} positions but {types.shape[0]} species")
        return types
