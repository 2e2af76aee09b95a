"""Total charge and spin multiplicity: the per-system inputs of charge/spin models.

A SeZM model trained with deepmd-kit's ``add_chg_spin_ebd`` (the DPA4-OMol25 models) adds an
embedding of the system's total charge and spin multiplicity to every atom's type features.
deepmd-kit's convention, kept here exactly:

* ``charge``: total charge in units of e (an integer; ``-1`` for an anion);
* ``spin``: spin multiplicity 2S + 1 (``1`` singlet, ``2`` doublet, ``3`` triplet);
* both are looked up in tables of the model: charge ``-100 … 99``, spin ``0 … 99``;
* when one is not given, the checkpoint's ``default_chg_spin`` ``[charge, spin]`` supplies
  it; a model without that default needs both (:class:`MissingChargeSpinError`).

deepmd-kit truncates the values to integers before the lookup; mdband refuses a value that is
not a whole number (:class:`ChargeSpinError`) rather than truncating it (``charge=0.5`` would
silently be a neutral system). A stored default is used as deepmd-kit uses it (truncated).

Front ends: :meth:`mdband.Potential.evaluate` (``charge=``, ``spin=``), ``atoms.info["charge"]``
and ``atoms.info["spin"]`` for :class:`mdband.Calculator` (fairchem's convention), ``mdband
run`` / ``relax`` ``--charge`` / ``--spin`` and ``pair_style mdband ... charge Q spin S``.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import torch

from mdband.errors import ChargeSpinError, MissingChargeSpinError

__all__ = [
    "CHARGE_RANGE",
    "SPIN_RANGE",
    "ChargeSpinError",
    "ChargeSpinInputs",
    "MissingChargeSpinError",
    "charge_spin_tensor",
    "model_kwargs",
    "refuse_unused",
    "whole_number",
]

#: charges the embedding has rows for (deepmd-kit's table: charge + 100 in [0, 200))
CHARGE_RANGE = (-100, 99)
#: spin multiplicities the embedding has rows for (deepmd-kit's table: [0, 100))
SPIN_RANGE = (0, 99)
_RANGES = {"charge": CHARGE_RANGE, "spin": SPIN_RANGE}


def whole_number(name: str, value) -> int:
    """Return ``value`` (charge or spin) as an int, checked.

    It must be a whole number (int, integral float or numpy scalar; not a bool or string)
    within the model's table (:data:`CHARGE_RANGE`, :data:`SPIN_RANGE`); else a
    :class:`ChargeSpinError` in one line is raised.
    """
    low, high = _RANGES[name]
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy / torch scalars
        value = value.item()
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and isinstance(value, numbers.Integral):
        number = int(value)
    elif ok and math.isfinite(float(value)) and float(value) == int(float(value)):
        number = int(float(value))
    else:
        unit = "total charge in e" if name == "charge" else "spin multiplicity 2S+1"
        raise ChargeSpinError(f"{name} must be a whole number ({unit}), got {value!r}")
    if not low <= number <= high:
        raise ChargeSpinError(f"{name} {number} is outside the model's table ({low} to {high})")
    return number


@dataclass(frozen=True)
class ChargeSpinInputs:
    """What a charge/spin model takes.

    ``default`` is deepmd-kit's ``default_chg_spin`` ``(charge, spin)`` (None: both must be
    given).
    """

    default: tuple[float, float] | None = None

    def resolve(self, charge=None, spin=None) -> tuple[int, int]:
        """Return the (charge, spin) a call evaluates.

        These are the values given, else the default's (as deepmd-kit uses it: truncated to
        integers). Raises :class:`MissingChargeSpinError` naming what is missing,
        :class:`ChargeSpinError` for a bad value.
        """
        missing = [n for n, v in (("charge", charge), ("spin", spin)) if v is None]
        if missing and self.default is None:
            raise MissingChargeSpinError(missing)
        if charge is None:
            assert self.default is not None  # a missing value raised above without one
            charge = int(self.default[0])  # deepmd-kit: .to(int64), toward zero
        if spin is None:
            assert self.default is not None
            spin = int(self.default[1])
        return whole_number("charge", charge), whole_number("spin", spin)

    def describe(self) -> str:
        """Describe the inputs in one line for ``mdband info`` and logs."""
        if self.default is None:
            return "total charge and spin multiplicity (required: no default_chg_spin)"
        c, s = self.default
        return f"total charge and spin multiplicity (defaults: charge {c:g}, spin {s:g})"


def refuse_unused(charge, spin) -> None:
    """Raise :class:`ChargeSpinError` when a charge or spin is given to a model without them.

    That is a model that takes neither: the values would be silently ignored.
    """
    given = [n for n, v in (("charge", charge), ("spin", spin)) if v is not None]
    if given:
        raise ChargeSpinError(
            f"this model takes no total charge or spin multiplicity (it was not trained with "
            f"add_chg_spin_ebd); remove {' and '.join(given)}"
        )


def charge_spin_tensor(
    inputs: ChargeSpinInputs | None, charge, spin, device
) -> torch.Tensor | None:
    """Return the ``charge_spin`` model input of a system for a model taking ``inputs``.

    ``inputs`` None means the model takes none. The input is int64 (1, 2)
    ``[[charge, spin]]`` on ``device`` (:meth:`ChargeSpinInputs.resolve`; one tensor per value
    and device, reused), or None for a model that takes neither (which refuses given values:
    :func:`refuse_unused`).
    """
    if inputs is None:
        refuse_unused(charge, spin)
        return None
    return _row(inputs.resolve(charge, spin), torch.device(device))


@functools.lru_cache(maxsize=256)
def _row(row: tuple[int, int], device: torch.device) -> torch.Tensor:
    return torch.tensor([row], dtype=torch.int64, device=device)


def model_kwargs(inputs: ChargeSpinInputs | None, charge_spin, device, systems=None) -> dict:
    """Return the energy module's ``charge_spin`` (and ``systems``) keywords of one call.

    ``charge_spin`` (from :func:`charge_spin_tensor`, or (S, 2) rows of S systems with
    ``systems`` the row of each atom), or the defaults' row when None, for a model taking
    ``inputs``; nothing for a model that takes none (:class:`ChargeSpinError` if one was
    given).
    """
    if inputs is None:
        if charge_spin is not None:
            raise ChargeSpinError("this model takes no total charge or spin multiplicity")
        return {}
    if charge_spin is None:
        charge_spin = charge_spin_tensor(inputs, None, None, device)
    if systems is None:
        return {"charge_spin": charge_spin}
    return {"charge_spin": charge_spin, "systems": systems}
