"""Typed exceptions raised by mdband's public API.

Every error a user can cause (a bad file, an unknown element, an unsupported option) raises a
subclass of :class:`MdbandError`, so front ends can turn it into a one-line message.
"""

from __future__ import annotations


class MdbandError(Exception):
    """Base class of every error mdband raises on bad input."""


class ModelFileError(MdbandError):
    """A model file is missing, corrupt, or not a SeZM / mdband model."""


class UnsupportedModelError(ModelFileError):
    """The checkpoint uses an option value mdband does not implement."""

    def __init__(self, option: str, value: object, detail: str = "") -> None:
        self.option = option
        self.value = value
        msg = f"unsupported model option {option}={value!r}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class UnknownElementError(MdbandError, ValueError):
    """A structure contains an element that the model's type map does not know."""

    def __init__(self, elements: list[str], type_map: list[str]) -> None:
        self.elements = list(elements)
        self.type_map = list(type_map)
        super().__init__(
            f"element(s) {', '.join(self.elements)} not in the model's type map {self.type_map}"
        )


class StructureError(MdbandError, ValueError):
    """Positions, cell or periodicity are unusable (NaN, zero volume, overlapping atoms...)."""


class SpinInputError(MdbandError, ValueError):
    """A spin model's magnetic moments are missing or malformed."""


class LayoutMismatchError(MdbandError, RuntimeError):
    """A rotation storage was handed to a consumer that does not read its layout."""


class UnknownModelKindError(ModelFileError):
    """A model file names a model kind that nothing registered (see :mod:`mdband.kinds`)."""

    def __init__(self, kind: str, known: list[str]) -> None:
        self.kind = kind
        self.known = list(known)
        super().__init__(
            f"unknown model kind {kind!r} (known: {', '.join(self.known)}); a package adds a kind "
            f"through an entry point in group 'mdband.model_kinds', a module through "
            f"MDBAND_PLUGINS=module (e.g. MDBAND_PLUGINS=mdband.testing.lj for the test kinds)"
        )


class ModelContractError(ModelFileError):
    """A model kind's network lacks a member of the model contract (:mod:`mdband.contract`)."""

    def __init__(self, kind: str, missing: list[str]) -> None:
        self.kind = kind
        self.missing = list(missing)
        super().__init__(
            f"model kind {kind!r} does not satisfy mdband's model contract "
            f"(mdband.contract.ModelContract): it does not declare {', '.join(self.missing)}"
        )


class PluginImportError(MdbandError):
    """A module named in ``MDBAND_PLUGINS`` or an ``mdband.model_kinds`` entry point fails."""


class OutputExistsError(MdbandError):
    """An output file exists (or a link stands at its path) and ``overwrite`` was not given."""


class MemoryBudgetError(MdbandError):
    """A system does not fit the memory budget even when evaluated one atom per chunk."""


class ResourceExhaustedError(MdbandError):
    """The disk filled up or memory ran out.

    The last good checkpoint and the trajectory are kept; ``mdband run`` exits with code 4.
    """


class ChargeSpinError(MdbandError, ValueError):
    """A total charge or spin multiplicity that the model cannot take.

    It is not a whole number in the model's table, or it was given to a model that takes none.
    """


class MissingChargeSpinError(ChargeSpinError):
    """A charge/spin model got no total charge or spin multiplicity and has no default."""

    def __init__(self, missing: list[str]) -> None:
        self.missing = list(missing)
        what = " and ".join(
            {"charge": "total charge (charge)", "spin": "spin multiplicity (spin)"}[m]
            for m in missing
        )
        api = ", ".join(f"{m}=" for m in missing)
        info = ", ".join(f"atoms.info[{m!r}]" for m in missing)
        flags = " ".join(f"--{m}" for m in missing)
        keys = " ".join(f"{m} N" for m in missing)
        super().__init__(
            f"this model needs the system's {what} and has no default_chg_spin; give "
            f"Potential.evaluate({api}), {info} (ASE), {flags} (mdband run, relax, "
            f"model-devi), 'pair_style mdband ... {keys}' or, in deepmd-kit data, "
            "set.*/charge_spin.npy"
        )


# what allocators say when memory runs out: torch's CPU allocator, vesin (std::bad_alloc), CUDA
_OUT_OF_MEMORY = (
    "can't allocate memory",
    "failed to allocate memory",
    "std::bad_alloc",
    "CUDA out of memory",
    "CUDA error: out of memory",
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Tell whether ``exc`` means that memory ran out, whichever allocator raised it.

    True for ``MemoryError`` (Python, numpy), ``torch.OutOfMemoryError`` (CUDA) and the
    ``RuntimeError`` of torch's CPU allocator ("DefaultCPUAllocator: can't allocate memory")
    or of a C++ library (vesin: "failed to allocate memory").
    """
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc) for t in _OUT_OF_MEMORY)
