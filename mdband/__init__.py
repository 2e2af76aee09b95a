"""mdband: molecular dynamics with SeZM (DPA4) potentials on banded Wigner storage."""

# ruff: noqa: E402  (the wait policy must be set before the imports below load torch)
from mdband.host_threads import apply_wait_policy

apply_wait_policy()  # before torch loads OpenMP: threads sleep, not spin (mdband.host_threads)

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
