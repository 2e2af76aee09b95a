"""``pair_style mdband`` refuses a spin model in one line (LAMMPS' atom_style spin is not
supported): the bridge's own check, without LAMMPS."""

from __future__ import annotations

from pathlib import Path

import pytest

from mdband.errors import MdbandError
from mdband.lammps import bridge

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deepmd_spin"


@pytest.mark.parametrize("name,scheme", [("spin_native", "native"), ("spin_deepspin", "deepspin")])
def test_bridge_refuses_spin_models(name, scheme):
    with pytest.raises(MdbandError, match=f"is a {scheme} spin model.*atom_style spin") as err:
        bridge.create(str(FIX / f"{name}.pt"), ["Fe", "Ni"], {"device": "cpu", "dtype": "float64"})
    assert "\n" not in str(err.value)


def test_engine_lammps_refuses_spin_models(tmp_path):
    """``mdband run --engine lammps`` says so before it starts LAMMPS."""
    import ase.io

    from mdband.md import RunConfig, lammps_start
    from mdband.md.errors import ConfigError

    atoms = ase.io.read(FIX / "spin_structures.extxyz", index=2)
    ase.io.write(tmp_path / "s.extxyz", atoms)
    cfg = RunConfig(structure=str(tmp_path / "s.extxyz"), model=str(FIX / "spin_native.pt"),
                    steps=1, engine="lammps", trajectory=str(tmp_path / "t.h5"),
                    progress=False)  # fmt: skip
    try:
        with pytest.raises(ConfigError, match="native spin model.*--engine ase"):
            lammps_start.prepare(cfg)
    finally:
        while lammps_start.HELD_LOCKS:
            lammps_start.HELD_LOCKS.pop().release()
    assert not (tmp_path / "t.h5").exists()
