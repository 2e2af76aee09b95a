"""``pair_style mdband a.mdband b.mdband c.mdband out_freq N out_file F``: model deviation in
LAMMPS.

The committee is the LJ model (the dynamics), the two-layer message-passing mp2 (its ghost
features cross ranks; smaller cutoff) and another LJ; float64. The model_devi.out of ``run 0``
is the same on 1, 2 and 4 ranks, with newton on and off and in a slab where some ranks own no
atoms, and equals mdband's own committee on that frame (what ``mdband run`` writes).
"""

from __future__ import annotations

import numpy as np
import pytest
from lammps_harness import (
    DEVICE,
    ELEMENTS,
    make_frame,
    read_dump,
    requires_lammps,
    run_lmp,
    write_data,
)

from mdband import load_model
from mdband.committee import Committee, read_model_devi
from mdband.committee.devi_file import header
from mdband.testing.lj import lennard_jones_potential

pytestmark = requires_lammps

CELLS = {"tri": dict(grid=(5, 5, 6), tilt=(0.2, -0.15, 0.1), seed=2),
         "slab": dict(grid=(16, 4, 4), keep_x=0.2, seed=3)}  # fmt: skip


@pytest.fixture(scope="module")
def committee_files(models, tmp_path_factory):
    lj2 = tmp_path_factory.mktemp("committee") / "lj2.mdband"
    lennard_jones_potential(type_map=ELEMENTS, cutoff=6.5, r_on=5.5, sigma=3.5).save(lj2)
    return [str(models["lj"]), str(models["mp2"]), str(lj2)]


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    d = tmp_path_factory.mktemp("frames")
    return {c: (f := make_frame(**kw), write_data(d / f"{c}.data", f)) for c, kw in CELLS.items()}


def _script(data, files, out, newton="on", slab_procs=None, extra="", tail="run 0"):
    procs = f"processors {slab_procs} 1 1" if slab_procs else ""
    return f"""
clear
units metal
atom_style atomic
boundary p p p
newton {newton}
{procs}
read_data {data}
pair_style mdband {" ".join(files)} dtype float64 device {DEVICE} out_freq 5 out_file {out} {extra}
pair_coeff * * {" ".join(ELEMENTS)}
neighbor 1.0 bin
{tail}
"""


@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_model_devi_same_on_any_rank_count(nprocs, frames, committee_files, tmp_path):
    cases, script = [], ""
    for cell, (_, data) in frames.items():
        for newton in ("on", "off"):
            name = f"{cell}-{newton}"
            slab = nprocs if cell == "slab" and nprocs > 1 else None
            extra = "atomic" if newton == "on" else ""
            script += _script(data, committee_files, f"{name}.out", newton, slab, extra)
            cases.append((name, cell, newton == "on"))
    run_lmp(script, tmp_path, nprocs=nprocs)
    committee = Committee([load_model(f, dtype="float64") for f in committee_files])
    for name, cell, atomic in cases:
        frame = frames[cell][0]
        path = tmp_path / f"{name}.out"
        assert path.read_text().splitlines()[0] + "\n" == header(atomic), name
        rows = read_model_devi(path)
        assert rows.shape == (1, 7 + atomic * len(frame.positions)), name
        devi = committee.evaluate(frame.positions, frame.cell, True, frame.species).deviation
        assert devi.max_devi_f > 1e-3 and devi.min_devi_v > 1e-7  # the models disagree
        ref = [0, *devi.row(), *(devi.devi_f if atomic else [])]
        np.testing.assert_allclose(rows[0], ref, rtol=6e-7, atol=0, err_msg=name)
        if nprocs == 1:
            (tmp_path.parent / f"ref-{name}.out").write_text(path.read_text())
        else:  # character for character what one rank wrote
            ref_file = tmp_path.parent / f"ref-{name}.out"
            if ref_file.exists():
                assert path.read_text() == ref_file.read_text(), name


def test_dynamics_are_the_first_models_and_rows_once_per_step(frames, committee_files, tmp_path):
    """Forces bitwise those of the first model alone; two runs give no duplicated row; fix pair
    reads the per-atom deviations."""
    data = frames["tri"][1]
    md = "velocity all create 60 7\nfix 1 all nve\n"
    dump = "dump d all custom 10 {}.dump id fx fy fz {}\ndump_modify d sort id format float %.17g\n"
    single = f"""
units metal
atom_style atomic
read_data {data}
pair_style mdband {committee_files[0]} dtype float64 device {DEVICE}
pair_coeff * * {" ".join(ELEMENTS)}
neighbor 1.0 bin
{md}{dump.format("single", "")}run 5
run 5
"""
    tail = md + "fix dv all pair 5 mdband devi_f 0\n" + dump.format("multi", "f_dv")
    tail += "run 5\nrun 5\n"
    run_lmp(single + _script(data, committee_files, "md.out", tail=tail), tmp_path, nprocs=2)
    a, b = read_dump(tmp_path / "single.dump"), read_dump(tmp_path / "multi.dump")
    for k in ("id", "fx", "fy", "fz"):
        assert a[k].tobytes() == b[k].tobytes(), k
    rows = read_model_devi(tmp_path / "md.out")
    assert rows[:, 0].tolist() == [0, 5, 10]
    committee = Committee([load_model(f, dtype="float64") for f in committee_files])
    assert b["f_dv"].max() == pytest.approx(rows[2, 4], rel=1e-6)
    assert b["f_dv"].min() == pytest.approx(rows[2, 5], rel=1e-6)
    assert committee.potentials[0].cutoff == 6.5


def test_existing_file_append_and_overwrite(frames, committee_files, tmp_path):
    data = frames["tri"][1]
    out = tmp_path / "md.out"
    out.write_text("keep\n")
    proc = run_lmp(_script(data, committee_files, "md.out"), tmp_path, 2, check=False)
    text = proc.stdout + proc.stderr
    errors = [line for line in text.splitlines() if line.startswith("ERROR")]
    assert proc.returncode != 0 and errors and "md.out exists" in errors[0], text[-2000:]
    assert out.read_text() == "keep\n"
    run_lmp(_script(data, committee_files, "md.out", extra="overwrite"), tmp_path)
    first = out.read_text()
    assert first.startswith("#") and len(first.splitlines()) == 2
    # append keeps every row and writes the current step again, as an appended dump does
    tail = "velocity all create 60 7\nfix 1 all nve\nrun 5"
    run_lmp(_script(data, committee_files, "md.out", extra="append", tail=tail), tmp_path)
    rows = read_model_devi(out)
    assert rows[:, 0].tolist() == [0, 0, 5]
    assert out.read_text().startswith(first)
    # restart_rows continue: rows after the current step dropped, none repeated
    extra = "append restart_rows continue"
    run_lmp(_script(data, committee_files, "md.out", extra=extra, tail=tail), tmp_path)
    assert read_model_devi(out)[:, 0].tolist() == [0, 0, 5]  # step 0's rows kept, 5 redone
    np.testing.assert_array_equal(read_model_devi(out), rows)


def test_model_devi_in_real_units(frames, committee_files, tmp_path):
    """units real: the rows are in kcal/mol and kcal/mol/A, as pair_style deepmd converts them
    (virial deviations x boltz/8.617343e-5, force deviations x that / angstrom)."""
    data = frames["tri"][1]
    metal = _script(data, committee_files, "metal.out", extra="atomic")
    real = _script(data, committee_files, "real.out", extra="atomic").replace(
        "units metal", "units real"
    )
    run_lmp(metal + real, tmp_path)
    a, b = read_model_devi(tmp_path / "metal.out"), read_model_devi(tmp_path / "real.out")
    energy = 0.0019872067 / 8.617343e-5  # LAMMPS' real and metal Boltzmann constants
    assert a[0, 0] == b[0, 0] == 0
    np.testing.assert_allclose(b[0, 1:], a[0, 1:] * energy, rtol=1e-5)  # %18.6e rows


@pytest.mark.parametrize(
    "rows_mode, expected", [("", [0, 4, 8, 8, 12]), ("restart_rows continue", [0, 4, 8, 12])]
)
def test_rows_after_read_restart_follow_appended_dumps(
    rows_mode, expected, frames, committee_files, tmp_path
):
    """deepmd-kit's input pattern: a run writes a restart file; a second process reads it,
    gives the same pair_style line (no append keyword) and appends to its dump. LAMMPS
    writes the restart step's frame again and so does the model deviation (pair_style
    deepmd's behaviour): row k is dump frame k. restart_rows continue keeps one row per step."""
    data = frames["tri"][1]
    style = f"pair_style mdband {' '.join(committee_files)} dtype float64 device {DEVICE} "
    style += f"out_freq 4 out_file md.out {rows_mode}\npair_coeff * * {' '.join(ELEMENTS)}\n"
    dump = "dump d all custom 4 traj.dump id x y z\n"
    first = f"""
units metal
atom_style atomic
read_data {data}
{style}neighbor 1.0 bin
velocity all create 60 7
fix 1 all nve
{dump}run 8
write_restart state.restart
"""
    second = f"""
read_restart state.restart
{style}neighbor 1.0 bin
fix 1 all nve
{dump}dump_modify d append yes
run 4
"""
    run_lmp(first, tmp_path)
    run_lmp(second, tmp_path)
    steps = read_model_devi(tmp_path / "md.out")[:, 0].astype(int).tolist()
    assert steps == expected
    lines = (tmp_path / "traj.dump").read_text().splitlines()
    dumped = [int(lines[i + 1]) for i, line in enumerate(lines) if line == "ITEM: TIMESTEP"]
    assert dumped == [0, 4, 8, 8, 12]
    if not rows_mode:
        assert steps == dumped  # row k is frame k


@pytest.mark.parametrize(
    "style, expected",
    [
        ("{lj} out_freq 10", "need two or more models"),
        ("{lj} {lj} out_freq -1", "out_freq must be >= 0"),
        ("{lj} {lj} append overwrite", "exclude each other"),
        ("{lj} dtype float64 {lj}", "unknown keyword"),
        ("{lj} {kr}", "committee model 2"),
        ("{lj} {lj} restart_rows again", "restart_rows must be repeat or continue"),
    ],
)
def test_committee_errors(style, expected, frames, committee_files, tmp_path):
    kr = tmp_path / "kr.mdband"
    lennard_jones_potential(type_map=("Kr",)).save(kr)
    line = "pair_style mdband " + style.format(lj=committee_files[0], kr=kr)
    script = f"units metal\natom_style atomic\nread_data {frames['tri'][1]}\n{line}\n"
    script += f"pair_coeff * * {' '.join(ELEMENTS)}\nrun 0\n"
    proc = run_lmp(script, tmp_path, check=False, timeout=180)
    text = proc.stdout + proc.stderr
    errors = [line for line in text.splitlines() if line.startswith("ERROR")]
    assert proc.returncode != 0 and errors and expected in errors[0], text[-2000:]
