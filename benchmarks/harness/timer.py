"""One timer for every benchmark: per-call wall, CPU and CUDA device times.

``timer(device).measure(fn, repeat=5, warmup=2)`` calls ``fn()`` ``warmup`` times untimed, then
``repeat`` times timed, and returns a :class:`Timing` of the per-call samples in milliseconds:

* :class:`CpuTimer` (``cpu``): the wall clock (``time.perf_counter``) and the CPU time (every
  thread, user + system) of this process and of the child processes it waited for, around each
  call (so a call that runs a command is charged the command's CPU time);
* :class:`CudaTimer` (``cuda``, ``cuda:N``): the same two clocks with the device synchronised
  before and after each call (the wall figure is what a caller waits for: host work, copies
  and launches included), and the device time between two CUDA events recorded around the call
  (the figure of a kernel). ``flush_cache=True`` overwrites a 256 MB buffer before each call,
  so that a kernel reads its inputs from memory rather than from L2.

Written here rather than taken from ``torch.utils.benchmark.Timer`` (which sets torch's thread
count during a measurement and reports blocks of calls) or ``triton.testing.do_bench`` (device
time only, repeat counts chosen by time, no CPU path): the benchmarks compare thread counts,
report the wall time a user waits for and need the same figures on a CPU.
:class:`PeakMemory` gives the CUDA allocator's peak over a block.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

try:
    import resource
except ImportError:  # not a Unix
    resource = None

#: the clocks of a :class:`Timing`
CLOCKS = ("wall", "cpu", "device")
#: bytes overwritten before each call by ``CudaTimer(flush_cache=True)`` (above any L2)
FLUSH_BYTES = 256 << 20


@dataclass(frozen=True)
class Timing:
    """Per-call times of one measurement, in milliseconds.

    Attributes
    ----------
    wall : tuple of float
        Wall-clock time of each timed call (on CUDA: device synchronised before and after).
    cpu : tuple of float
        CPU time (all threads, user + system) of this process and of the child processes it
        waited for during each call.
    device : tuple of float or None
        Time between CUDA events recorded before and after each call (None on a CPU).
    """

    wall: tuple[float, ...]
    cpu: tuple[float, ...]
    device: tuple[float, ...] | None = None

    def samples(self, clock: str = "wall") -> tuple[float, ...]:
        """The per-call times of ``clock`` ("wall", "cpu" or "device")."""
        if clock not in CLOCKS:
            raise ValueError(f"clock {clock!r}: expected one of {', '.join(CLOCKS)}")
        values = getattr(self, clock)
        if values is None:
            raise ValueError("no device times: the calls were not timed on a CUDA device")
        return values

    def median(self, clock: str = "wall") -> float:
        """Median ms per call of ``clock``."""
        return statistics.median(self.samples(clock))

    def min(self, clock: str = "wall") -> float:
        """Fastest call of ``clock``, in ms."""
        return min(self.samples(clock))

    def quantile(self, q: float, clock: str = "wall") -> float:
        """The ``q`` quantile (0 to 1, linear between the sorted samples) of ``clock``."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile {q}: expected a number from 0 to 1")
        xs = sorted(self.samples(clock))
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    @property
    def ms(self) -> float:
        """Median wall-clock ms per call: the figure the benchmarks report."""
        return self.median("wall")

    @property
    def kernel_ms(self) -> float:
        """Median device ms per call where CUDA events timed it, else median wall ms: the
        figure of a kernel (no host work in it on a GPU)."""
        return self.median("device" if self.device is not None else "wall")

    def as_dict(self, prefix: str = "") -> dict:
        """Medians for a results record: ``{prefix}ms`` (wall), ``{prefix}min_ms``,
        ``{prefix}cpu_ms``, ``{prefix}device_ms`` (CUDA only) and ``{prefix}calls``."""
        out = {
            f"{prefix}ms": self.ms,
            f"{prefix}min_ms": self.min(),
            f"{prefix}cpu_ms": self.median("cpu"),
        }
        if self.device is not None:
            out[f"{prefix}device_ms"] = self.median("device")
        out[f"{prefix}calls"] = len(self.wall)
        return out


def cpu_seconds() -> float:
    """CPU seconds (user + system, every thread) of this process and of its waited-for
    children so far: ``time.process_time`` (ns resolution) plus the children's ``getrusage``."""
    own = time.process_time()
    if resource is None:  # not a Unix: this process only
        return own
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own + kids.ru_utime + kids.ru_stime


def _check_counts(repeat: int, warmup: int) -> None:
    if repeat < 1 or warmup < 0:
        raise ValueError(f"repeat {repeat}, warmup {warmup}: need repeat >= 1 and warmup >= 0")


class CpuTimer:
    """Wall and process CPU time around each call (see the module docstring)."""

    device = "cpu"

    def measure(self, fn: Callable[[], object], repeat: int = 5, warmup: int = 2) -> Timing:
        """``warmup`` untimed calls of ``fn``, then ``repeat`` timed ones."""
        _check_counts(repeat, warmup)
        for _ in range(warmup):
            fn()
        wall, cpu = [], []
        for _ in range(repeat):
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            c1 = cpu_seconds()
            wall.append(1e3 * (t1 - t0))
            cpu.append(1e3 * (c1 - c0))
        return Timing(tuple(wall), tuple(cpu))


class CudaTimer:
    """Wall and CPU time with the device synchronised around each call, and the device time
    between CUDA events (see the module docstring).

    Parameters
    ----------
    device : str or torch.device
        A CUDA device (``cuda`` is the current one).
    flush_cache : bool
        Overwrite :data:`FLUSH_BYTES` of device memory before each call (outside its timing).
    """

    def __init__(self, device="cuda", flush_cache: bool = False) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"CudaTimer: {self.device} is not a CUDA device")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._flush = None
        if flush_cache:
            self._flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=self.device)

    def measure(self, fn: Callable[[], object], repeat: int = 5, warmup: int = 2) -> Timing:
        """``warmup`` untimed calls of ``fn``, then ``repeat`` timed ones."""
        _check_counts(repeat, warmup)
        cuda = self._torch.cuda
        with cuda.device(self.device):
            for _ in range(warmup):
                fn()
            wall, cpu, events = [], [], []
            for _ in range(repeat):
                if self._flush is not None:
                    self._flush.zero_()
                start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
                cuda.synchronize()
                c0 = cpu_seconds()
                t0 = time.perf_counter()
                start.record()
                fn()
                end.record()
                cuda.synchronize()
                t1 = time.perf_counter()
                c1 = cpu_seconds()
                wall.append(1e3 * (t1 - t0))
                cpu.append(1e3 * (c1 - c0))
                events.append((start, end))
        return Timing(tuple(wall), tuple(cpu), tuple(s.elapsed_time(e) for s, e in events))


def timer(device="cpu", flush_cache: bool = False) -> CpuTimer | CudaTimer:
    """The timer of ``device`` (``cpu``, ``cuda`` or ``cuda:N``; ``flush_cache`` on CUDA only)."""
    kind = getattr(device, "type", None) or str(device).split(":")[0]
    if kind == "cpu":
        return CpuTimer()
    if kind == "cuda":
        return CudaTimer(device, flush_cache)
    raise ValueError(f"device {device!r}: the benchmarks time cpu and cuda devices")


def measure(
    fn: Callable[[], object],
    device="cpu",
    repeat: int = 5,
    warmup: int = 2,
    flush_cache: bool = False,
) -> Timing:
    """``timer(device, flush_cache).measure(fn, repeat, warmup)``."""
    return timer(device, flush_cache).measure(fn, repeat, warmup)


def once(fn: Callable[[], object], device="cpu") -> tuple[object, Timing]:
    """One timed call of ``fn`` on ``device``, no warm-up: ``(its return value, its Timing)``
    (a first call, or a run long enough to time once)."""
    value = []
    t = measure(lambda: value.append(fn()), device, repeat=1, warmup=0)
    return value[0], t


class PeakMemory:
    """The CUDA allocator's peak over a ``with`` block (nothing on a CPU).

    ``peak_bytes`` is the most memory allocated on the device at any time in the block (every
    tensor, not only the block's), ``start_bytes`` what was allocated when it began; both None
    on a CPU. GB and MB are 10⁹ and 10⁶ bytes, as mdband's memory budget counts them.
    """

    def __init__(self, device) -> None:
        import torch

        self._torch = torch
        self.device = torch.device(device)
        self.peak_bytes: int | None = None
        self.start_bytes: int | None = None

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            cuda = self._torch.cuda
            cuda.synchronize(self.device)
            cuda.reset_peak_memory_stats(self.device)
            self.start_bytes = cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)
            self.peak_bytes = self._torch.cuda.max_memory_allocated(self.device)

    @property
    def peak_gb(self) -> float | None:
        """The peak in GB (None on a CPU)."""
        return None if self.peak_bytes is None else self.peak_bytes / 1e9

    @property
    def added_mb(self) -> float | None:
        """The peak above what the block started with, in MB (None on a CPU)."""
        if self.peak_bytes is None:
            return None
        return (self.peak_bytes - self.start_bytes) / 1e6
