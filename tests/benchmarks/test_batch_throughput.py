"""benchmarks/batch_throughput.py runs and measures what it claims: water frames of the sizes
asked for, written as deepmd-kit systems mdband reads back, timings of every mode."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import batch_throughput as bt  # noqa: E402


def test_frames_are_water_of_the_sizes_asked_for(tmp_path):
    from ase.geometry import get_distances

    from mdband.io.systems import read_systems

    frames = bt.make_frames(12, 9, 63)
    sizes = [len(s) for _, _, s in frames]
    assert min(sizes) >= 9 and max(sizes) <= 63 and all(n % 3 == 0 for n in sizes)
    for pos, cell, species in frames:
        assert species[:3] == ["O", "H", "H"]
        volume = np.linalg.det(cell)
        assert 25 < volume / (len(species) // 3) < 35  # about 1 g/cm3
        d = get_distances(pos, cell=cell, pbc=True)[1]
        assert d[np.triu_indices(len(pos), 1)].min() > 0.9  # O-H bonds 0.957 A, others >= 1.6
    dirs = bt.write_systems(frames, tmp_path, ["O", "H"])
    back = [f for d in dirs for f in read_systems(d)]
    assert sorted(f.n_atoms for f in back) == sorted(sizes)


@pytest.mark.skipif(not bt.WATER_MODEL.is_file(), reason="needs ../shared/data (water model)")
def test_cpu_run_without_commands(tmp_path, capsys):
    old = torch.get_num_threads()
    try:
        rows = bt.main(
            [
                "--cases",
                "small",
                "--frames",
                "6",
                "--repeat",
                "1",
                "--no-commands",
                "--batch-atoms",
                "64",
                "1024",
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
    finally:
        torch.set_num_threads(old)
    (row,) = json.loads((tmp_path / "r.json").read_text())
    assert row == rows[0] and row["frames"] == 6 and row["atoms_max"] <= 63
    assert row["batched_64_frames_per_s"] > 0 and row["batched_1024_frames_per_s"] > 0
    assert row["one_by_one_frames_per_s"] > 0 and "dp_test" not in row
    assert row["batched_64_frames_per_cpu_s"] > 0 and row["one_by_one_frames_per_cpu_s"] > 0
    assert "| small | 6 |" in capsys.readouterr().out
