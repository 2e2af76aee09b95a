"""mdband: molecular dynamics with SeZM (DPA4) potentials on banded Wigner storage."""

from mdband import fit  # a callable package: mdband.fit(...)
from mdband._version import __version__
from mdband.builtin import builtin_models
from mdband.calculator import Calculator
from mdband.committee import Committee, CommitteeCalculator
from mdband.errors import (
    ChargeSpinError,
    MdbandError,
    MissingChargeSpinError,
    ModelFileError,
    StructureError,
    UnknownElementError,
    UnsupportedModelError,
)
from mdband.loader import load_model
from mdband.potential import Potential, Result

__all__ = [
    "__version__",
    "Calculator",
    "Committee",
    "CommitteeCalculator",
    "load_model",
    "fit",
    "builtin_models",
    "Potential",
    "Result",
    "MdbandError",
    "ChargeSpinError",
    "MissingChargeSpinError",
    "ModelFileError",
    "StructureError",
    "UnknownElementError",
    "UnsupportedModelError",
]
