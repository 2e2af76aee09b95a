"""Copy the complete frames of an H5MD trajectory into a new, cleanly closed HDF5 file.

Only h5py and numpy are imported (no mdband), so :mod:`mdband.io.repair` can run this file as a
short-lived child process: on a damaged file left by a killed writer HDF5's SWMR reader can
retry metadata reads without end, and only a separate process can be stopped then.

A frame is *complete* when every time series (a dataset whose first axis is unlimited) holds
its row, every chunk holding it lies inside the file, and the steps up to it increase.
Hard links (the shared ``step``/``time`` datasets) are kept, attributes are copied with their
HDF5 types.

Run as ``python h5copy.py SRC DST|- [THROUGH_STEP]``: it prints ``progress ROWS`` lines while it
copies and ``done FRAMES LAST_STEP READABLE`` at the end (``-``: only count, write nothing).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import h5py
import numpy as np

LIBVER = ("v110", "v110")  # the writer's format (SWMR-capable)
_BLOCK_BYTES = 1 << 24


def open_for_reading(path) -> tuple[h5py.File, bool]:
    """Open ``path`` read-only; a file flagged "open for write" is opened in SWMR-read mode.

    Returns the file and whether it was flagged.
    """
    try:
        return h5py.File(path, "r"), False
    except OSError as exc:
        if "already open for write" not in str(exc):
            raise
    return h5py.File(path, "r", swmr=True, libver=LIBVER), True


def _objects(f: h5py.File) -> list[tuple[str, str, Any]]:
    """Every link below the root as ``(path, kind, object)``, parents before children."""
    out: list[tuple[str, str, Any]] = []

    def walk(group: h5py.Group, prefix: str) -> None:
        for name in group:
            link = group.get(name, getlink=True)
            path = f"{prefix}{name}"
            if not isinstance(link, h5py.HardLink):
                out.append((path, "link", link))
                continue
            obj = group[name]
            if isinstance(obj, h5py.Group):
                out.append((path, "group", obj))
                walk(obj, path + "/")
            else:
                out.append((path, "dataset", obj))

    walk(f, "")
    return out


def _is_series(ds: h5py.Dataset) -> bool:
    return ds.maxshape is not None and len(ds.maxshape) > 0 and ds.maxshape[0] is None


def _rows_inside(ds: h5py.Dataset, size: int) -> int:
    """Rows of ``ds`` whose chunks all lie inside a file of ``size`` bytes."""
    rows = [int(ds.shape[0])]
    if ds.chunks is None or ds.shape[0] == 0:
        return rows[0]

    def check(info) -> None:
        if info.byte_offset is None or info.byte_offset + info.size > size:
            rows[0] = min(rows[0], int(info.chunk_offset[0]))

    try:
        ds.id.chunk_iter(check)
    except (AttributeError, NotImplementedError):  # HDF5 < 1.12.3: one lookup per chunk
        for k in range(ds.id.get_num_chunks()):
            check(ds.id.get_chunk_info(k))
    return rows[0]


def readable_frames(f: h5py.File, size: int) -> tuple[int, np.ndarray]:
    """Return the number of complete frames and their steps (``particles/all/position/step``)."""
    series = [obj for _, kind, obj in _objects(f) if kind == "dataset" and _is_series(obj)]
    n = min([_rows_inside(ds, size) for ds in series], default=0)
    step_name = "particles/all/position/step"
    if step_name not in f:
        return n, np.zeros(0, dtype=np.int64)
    steps = np.asarray(f[step_name][:n], dtype=np.int64)
    bad = np.nonzero(np.diff(steps) <= 0)[0]
    if len(bad):
        n = int(bad[0]) + 1
    if n and steps[0] < 0:
        n = 0
    return n, steps[:n]


def _copy_attrs(src, dst) -> None:
    for name in src.attrs:
        dst.attrs.create(name, src.attrs[name], dtype=src.attrs.get_id(name).dtype)


def copy_frames(src: h5py.File, dst: h5py.File, n_keep: int, progress=None) -> None:
    """Copy the layout of ``src`` into ``dst`` with the first ``n_keep`` rows of each series."""
    done: list[tuple[object, str]] = []  # (source object, its first path in dst)
    for path, kind, obj in _objects(src):
        if kind == "link":
            dst[path] = obj  # a soft or external link, as it was
            continue
        first = next((p for o, p in done if o == obj), None)
        if first is not None:
            dst[path] = dst[first]  # a hard link to the copy
            continue
        done.append((obj, path))
        if kind == "group":
            _copy_attrs(obj, dst.create_group(path))
            continue
        if not _is_series(obj):
            _copy_attrs(obj, dst.create_dataset(path, data=obj[()], dtype=obj.dtype))
            continue
        out = dst.create_dataset(
            path,
            shape=(n_keep, *obj.shape[1:]),
            maxshape=obj.maxshape,
            dtype=obj.dtype,
            chunks=obj.chunks,
            compression=obj.compression,
            compression_opts=obj.compression_opts,
            shuffle=obj.shuffle,
            fillvalue=obj.fillvalue,
        )
        _copy_attrs(obj, out)
        row_bytes = max(1, int(np.prod(obj.shape[1:], dtype=np.int64)) * obj.dtype.itemsize)
        block = max(1, _BLOCK_BYTES // row_bytes)
        for start in range(0, n_keep, block):
            stop = min(n_keep, start + block)
            out[start:stop] = obj[start:stop]
            if progress is not None:
                progress(stop)
    _copy_attrs(src, dst)


def copy_file(src_path, dst_path, through_step: int | None = None, progress=None):
    """Copy the complete frames (steps <= ``through_step``) of ``src_path`` to ``dst_path``.

    ``dst_path`` None: only count. Returns ``(frames kept, last kept step or None, frames
    readable)``.
    """
    size = os.path.getsize(src_path)
    src, _ = open_for_reading(src_path)
    try:
        n, steps = readable_frames(src, size)
        keep = n if through_step is None else int(np.searchsorted(steps, through_step, "right"))
        if dst_path is not None:
            with h5py.File(dst_path, "w", libver=LIBVER) as dst:
                copy_frames(src, dst, keep, progress)
                dst.flush()
                os.fsync(dst.id.get_vfd_handle())
    finally:
        src.close()
    return keep, (int(steps[keep - 1]) if keep else None), n


def _main(argv: list[str]) -> int:
    src, dst = argv[0], (None if argv[1] == "-" else argv[1])
    through = int(argv[2]) if len(argv) > 2 else None

    def progress(rows: int) -> None:
        print(f"progress {rows}", flush=True)

    print("progress 0", flush=True)
    try:
        keep, last, n = copy_file(src, dst, through, progress)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        print("error " + " ".join(f"{type(exc).__name__}: {exc}".split()), flush=True)
        return 1
    print(f"done {keep} {'none' if last is None else last} {n}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
