"""EngineSettings: run-time choices that never change a model's numbers beyond rounding.

One validated dataclass. Each field may be overridden by a documented environment variable when
the caller passes nothing; ``mdband info`` prints the resolved values.

=================  =======================  ==========================================
field              environment variable     values
=================  =======================  ==========================================
rotation_layout    MDBAND_ROTATION_LAYOUT   auto (default) | band | dense
kernels            MDBAND_KERNELS           auto (default: fused ops on CUDA tensors,
                                            torch path on CPU) | ops (fused ops everywhere;
                                            their references on CPU) | torch
recompute          MDBAND_RECOMPUTE         off (default) | stack: keep only the input of
                                            each block's SO(2) mixing stack, rebuild its
                                            layers in the backward | all: also rebuild each
                                            block's edge work (least memory)
stack_precision    MDBAND_STACK_PRECISION   tf32x3 (default): the fused SO(2) mixing
                                            layers (CUDA, float32) multiply on tensor cores
                                            with three TF32 products per fp32 product
                                            (about fp32 rounding; GPUs with TMA, sm90+,
                                            else exact cuBLAS) | fp16x3: three fp16
                                            products (same rounding or better: each
                                            edge's inputs scaled by a power of two;
                                            about tf32x3's speed) | fp16: one fp16
                                            product (about 2^-11 relative per product) |
                                            ieee: exact fp32 cuBLAS products
                                            (and exact FMAs in the grid nets'
                                            fused product, tf32x3 dots otherwise)
cuda_graphs        MDBAND_CUDA_GRAPHS       auto (default): on CUDA, pad the edge list
                                            to a size bucket with edges beyond the
                                            cutoff (exactly zero contribution) and
                                            replay one captured CUDA graph per bucket
                                            from its second use | off: launch every
                                            kernel from Python, edges unpadded
neighbour_list     MDBAND_NEIGHBOUR_LIST    auto (default): mdband's cell list on the
                                            model's device for CUDA models (its pairs
                                            by Triton kernels), vesin on numpy for CPU
                                            models | cell_list: the cell list on any
                                            device (torch operations off CUDA) | vesin:
                                            vesin on the CPU (a CUDA model copies the
                                            list over)
compile            MDBAND_COMPILE           off (default) | on: torch.compile the SeZM
                                            model's torch code between the fused ops
                                            (one compiled stretch between two ops;
                                            the first call of a new size compiles,
                                            tens of seconds); chunked, recomputed and
                                            LAMMPS-exchange evaluations stay eager;
                                            training never compiles
memory_budget      MDBAND_MEMORY_BUDGET     auto (default): on CUDA 90 % of the memory
                                            the GPU has free, on CPU no limit | off: no
                                            limit | a size ("8GB", "512MiB", "1.5 GiB",
                                            or bytes): evaluations whose estimated
                                            memory exceeds it run in chunks of
                                            destination atoms (same numbers)
host_memory        MDBAND_HOST_MEMORY       auto (default): once a model is loaded for
                                            the CPU, freed host memory stays in the
                                            process for the next call (glibc: no mmap
                                            per large block, no heap trim; 20-45 %
                                            faster CPU calls; the process keeps its
                                            peak memory) | keep: the same for any
                                            device | system: the C library's own
                                            (mdband.host_memory)
=================  =======================  ==========================================
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass

from mdband import host_memory

ENV = {
    "rotation_layout": "MDBAND_ROTATION_LAYOUT",
    "kernels": "MDBAND_KERNELS",
    "recompute": "MDBAND_RECOMPUTE",
    "stack_precision": "MDBAND_STACK_PRECISION",
    "cuda_graphs": "MDBAND_CUDA_GRAPHS",
    "compile": "MDBAND_COMPILE",
    "neighbour_list": "MDBAND_NEIGHBOUR_LIST",
    "memory_budget": "MDBAND_MEMORY_BUDGET",
    "host_memory": "MDBAND_HOST_MEMORY",
}
_CHOICES = {
    "rotation_layout": ("auto", "band", "dense"),
    "kernels": ("auto", "ops", "torch"),
    "recompute": ("off", "stack", "all"),
    "stack_precision": ("tf32x3", "fp16x3", "fp16", "ieee"),
    "cuda_graphs": ("auto", "off"),
    "compile": ("off", "on"),
    "neighbour_list": ("auto", "cell_list", "vesin"),
    "host_memory": host_memory.CHOICES,
}
_BOOL = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


#: bytes per unit of a memory size (decimal kB/MB/GB/TB, binary KiB/MiB/GiB/TiB)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([a-z]*)\s*$")


def parse_memory_size(text) -> int:
    """Bytes of a size such as ``"8GB"``, ``"512MiB"``, ``"1.5 GiB"``, ``"2e9"`` or ``4096``.

    Raises ValueError (naming the text) for anything else or a size below one byte.
    """
    m = _SIZE.match(str(text).strip().lower())
    if m is None or m.group(3) not in _SIZE_UNITS:
        raise ValueError(
            f"{text!r} is not a memory size (a number of bytes or e.g. 8GB, 512MiB, 1.5GiB)"
        )
    value = float(m.group(1)) * 10 ** int(m.group(2) or 0) * _SIZE_UNITS[m.group(3)]
    if value < 1:
        raise ValueError(f"memory size {text!r} is below one byte")
    return int(value)


def check_budget(value, source: str = "memory_budget") -> str:
    """Return the memory_budget setting normalised: "auto", "off" or a size as given.

    Anything else raises a ValueError naming ``source``.
    """
    text = str(value).strip().lower()
    if text not in ("auto", "off"):
        try:
            parse_memory_size(text)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}, or auto or off") from None
    return text


#: what a boolean means for the settings that accept one
_BOOL_MEANS = {
    "recompute": {True: "all", False: "off"},
    "cuda_graphs": {True: "auto", False: "off"},
    "compile": {True: "on", False: "off"},
    "host_memory": {True: "keep", False: "system"},
}


#: measured force error of each ``stack_precision`` mode against float64 (max |ΔF|; one H200,
#: 2026-12-01 and 2026-12-04, BENCHMARKS.md and docs/precision.md), printed by ``mdband info``
PRECISION_ACCURACY = {
    "tf32x3": "forces within 4.1e-6 eV/Å of float64 (default DPA4 config), 1.6e-9 (trained water)",
    "fp16x3": "forces within 4.0e-6 eV/Å of float64 (default DPA4 config), 1.2e-9 (DPA4-Mini); "
    "each edge's inputs scaled by a power of two; about tf32x3's speed (docs/precision.md)",
    "fp16": "forces off by up to 7.6e-4 eV/Å (default DPA4 config), 5.7e-6 (trained water): "
    "exploratory runs only",
    "ieee": "exact fp32 products (cuBLAS); forces at fp32 rounding",
}


@dataclass(frozen=True)
class EngineSettings:
    """The engine settings of a model: one validated field per setting of the module table.

    Every field holds one of its documented values (ValueError otherwise);
    :meth:`resolve` also reads the environment variables.
    """

    rotation_layout: str = "auto"
    kernels: str = "auto"
    recompute: str = "off"
    stack_precision: str = "tf32x3"
    cuda_graphs: str = "auto"
    compile: str = "off"
    neighbour_list: str = "auto"
    memory_budget: str = "auto"
    host_memory: str = "auto"

    def __post_init__(self) -> None:
        """Normalise ``memory_budget`` and refuse a value that is not one of a field's choices."""
        object.__setattr__(self, "memory_budget", check_budget(self.memory_budget))
        for name, choices in _CHOICES.items():
            if getattr(self, name) not in choices:
                raise ValueError(
                    f"{name}={getattr(self, name)!r} is not one of {', '.join(choices)}"
                )

    @classmethod
    def resolve(cls, **explicit) -> EngineSettings:
        """Explicit (non-None) arguments win, then the environment, then the defaults."""
        kw = {}
        for name, var in ENV.items():
            value = explicit.get(name)
            source = name
            if value is None and var in os.environ:
                value, source = os.environ[var], var
            if value is None:
                continue
            value = str(value).strip().lower() if not isinstance(value, bool) else value
            if name == "memory_budget":
                kw[name] = check_budget(value, source)
                continue
            flag = value if isinstance(value, bool) else _BOOL.get(value)
            if name in _BOOL_MEANS and flag is not None:
                value = _BOOL_MEANS[name][flag]
            if value not in _CHOICES[name]:
                raise ValueError(f"{source}={value!r} is not one of {', '.join(_CHOICES[name])}")
            kw[name] = value
        return cls(**kw)

    def to_dict(self) -> dict:
        """Return the settings as a plain dict, field name to value."""
        return asdict(self)

    def neighbour_backend(self, device) -> str:
        """``"cell_list"`` (torch, on the model's device) or ``"vesin"`` (numpy, CPU)."""
        if self.neighbour_list == "auto":
            return "cell_list" if str(device).startswith("cuda") else "vesin"
        return self.neighbour_list

    @property
    def memory_budget_bytes(self) -> int | None:
        """The budget as bytes; None for "auto" and "off" (resolved per device by the model)."""
        if self.memory_budget in ("auto", "off"):
            return None
        return parse_memory_size(self.memory_budget)

    def ops_on(self, t) -> bool:
        """Whether the fused ops run for tensors like ``t`` (decided per device, not layout)."""
        return self.kernels == "ops" or (self.kernels == "auto" and t.is_cuda)
