"""Where a call's time goes: torch.profiler around one call, CUDA graphs off for a block.

:func:`profile` runs a function once untimed and once under ``torch.profiler`` (CPU, and CUDA
on a GPU) and returns the profiler; :func:`self_ms` is an event's own time on the device (its
CPU time in a CPU run). A ``Potential`` replays its steps from CUDA graphs, which the profiler
sees as one launch: :func:`eager` turns the replay off for a block, :func:`graph_counts`
reports the captures and replays so far. Both reach the potential's step graphs (``_steps``),
the one place the benchmarks do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


def _on_cuda(device) -> bool:
    return str(getattr(device, "type", device)).startswith("cuda")


def profile(
    fn: Callable[[], object],
    device,
    warmup: bool = True,
    record_shapes: bool = False,
    with_stack: bool = False,
):
    """``torch.profiler.profile`` of one call of ``fn`` on ``device`` (after one untimed call
    when ``warmup``); the device is synchronised inside the profile."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    cuda = _on_cuda(device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if warmup:
        fn()
        sync()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=acts, record_shapes=record_shapes, with_stack=with_stack) as p:
        fn()
        sync()
    return p


def self_ms(event) -> float:
    """An event's own device time in ms (its own CPU time when it has none: a CPU run)."""
    return (getattr(event, "self_device_time_total", 0) or event.self_cpu_time_total) / 1e3


def total_ms(event) -> float:
    """An event's device time in ms with what runs under it (CPU time in a CPU run)."""
    return (getattr(event, "device_time_total", 0) or event.cpu_time_total) / 1e3


def top(events, rows: int) -> list[list]:
    """``[name, own ms, calls]`` of the ``rows`` events of most own time (:func:`self_ms`)."""
    ranked = sorted(events, key=self_ms, reverse=True)[:rows]
    return [[e.key[:80], round(self_ms(e), 4), e.count] for e in ranked]


@contextmanager
def eager(pot) -> Iterator[None]:
    """``pot``'s calls run eagerly in the block (no CUDA-graph replay: the profiler sees every
    kernel); its step graphs are kept and back after it."""
    steps, pot._steps = pot._steps, None
    try:
        yield
    finally:
        pot._steps = steps


def graph_counts(pot) -> dict | None:
    """``captures``, ``replays`` and ``releases`` of ``pot``'s CUDA-graph steps so far (None
    where it has none: a CPU, or graphs off)."""
    steps = pot._steps
    if steps is None:
        return None
    return {"captures": steps.n_captures, "replays": steps.n_replays, "releases": steps.n_releases}
