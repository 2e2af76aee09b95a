"""Bounded work and typed errors on odd input (issue 40), one test per case:

* an absurd cutoff, a cell far thinner than the cutoff, a cell of volume 1e-7 Å³: refused in
  one line before the neighbour list is built (no hang);
* an atom 1e6 Å away from an open structure: no SIGFPE inside vesin (mdband's own cell list
  searches the boxes vesin cannot), in ``Potential.evaluate``, the ASE calculator, the
  start-up checks of ``mdband run`` and ``mdband relax`` (run in child processes: before the
  fix the signal killed the process);
* an atom at 1e300 Å in a periodic cell: refused (no 32-bit image flag overflow);
* zero atoms: the empty result an ASE user expects (energy 0, forces (0, 3));
* ``Committee.evaluate`` checks its input as ``Potential.evaluate`` does;
* out of memory from any allocator is recognised (torch's CPU allocator raises RuntimeError).
"""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from ase import Atoms
from ase.build import bulk

from mdband import Calculator, Committee, load_model
from mdband.errors import StructureError
from mdband.testing.lj import lennard_jones_potential


@pytest.fixture(scope="module")
def cuni():
    return load_model("builtin:emt-cuni", device="cpu", dtype="float64")


def _cu(n=2):
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True).repeat(n)
    atoms.symbols[::4] = "Ni"
    return atoms


@pytest.mark.timeout(60)
def test_an_absurd_cutoff_is_refused_before_the_search():
    pot = lennard_jones_potential(cutoff=1e6, r_on=9e5)
    atoms = bulk("Ar", "fcc", a=5.26, cubic=True)
    with pytest.raises(StructureError, match="periodic images of the cell"):
        pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "cell",
    [
        [[3.6, 0, 0], [0, 3.6, 0], [3.6, 3.6, 1e-6]],  # a flat, sheared cell
        [[1e-2, 0, 0], [0, 1e-2, 0], [0, 0, 1e-3]],  # a volume of 1e-7 Å³
    ],
)
def test_a_cell_far_thinner_than_the_cutoff_is_refused(cuni, cell):
    pos = np.random.default_rng(0).random((4, 3)) * 1e-3
    with pytest.raises(StructureError, match="far below the cutoff .* periodic images"):
        cuni.evaluate(pos, np.array(cell), True, ["Cu"] * 4)


def test_too_many_edges_are_refused(cuni):
    """A dense periodic cell: about 1e13 edges, refused from the estimate."""
    pos = np.random.default_rng(0).random((20000, 3)) * 100.0
    with pytest.raises(StructureError, match=r"neighbour list would hold about .* edges"):
        cuni.evaluate(pos / 100.0, np.eye(3), True, ["Cu"] * 20000)


def test_an_atom_at_1e300_in_a_periodic_cell_is_refused(cuni):
    atoms = _cu()
    atoms.positions[3, 0] = 1e300
    with pytest.raises(StructureError, match="atom 3 is 1e\\+300 Å from the origin"):
        cuni.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers)
    atoms.positions[3, 0] = 7.2 * 2**21  # within the coordinate range, but 2**21 cells away
    with pytest.raises(StructureError, match="cells away from the cell .* wrap the structure"):
        cuni.evaluate(atoms.positions, atoms.cell.array, True, atoms.numbers)


_FAR_ATOM = textwrap.dedent(
    """
    import ase.io
    import numpy as np
    from ase import Atoms
    from click.testing import CliRunner

    from mdband import Calculator
    from mdband.cli import main
    from mdband.graph import COINCIDENT_R2
    from mdband.testing.lj import lennard_jones_potential

    pot = lennard_jones_potential(cutoff=5.0, r_on=4.0)  # vesin is the concern, not the model
    pot.save("lj.mdband")
    rng = np.random.default_rng(1)
    pos = rng.random((12, 3)) * 9.0
    pos[0] = [1.0e6, 0.0, 0.0]
    res = pot.evaluate(pos, None, False, ["Ar"] * 12)
    atoms = Atoms("Ar12", positions=pos)
    atoms.calc = Calculator(pot)
    assert abs(atoms.get_potential_energy() - res.energy) < 1e-9
    assert np.allclose(atoms.get_forces(), res.forces) and not res.forces[0].any()
    # the edges are every pair within the cutoff (brute force)
    g = pot.edges(pos, None, False)
    d = pos[None, :, :] - pos[:, None, :]
    r2 = (d * d).sum(-1)
    want = {(int(j), int(i)) for i, j in zip(*np.nonzero((r2 < 25.0) & (r2 > COINCIDENT_R2)))}
    assert set(zip(g.src.tolist(), g.dst.tolist())) == want and len(want) == g.n_edges
    # a flat open flake vesin's grid cannot hold (2000 x 60 cutoffs)
    flake = np.zeros((40, 3))
    flake[:20, 0] = np.arange(20) * 2.4
    flake[20:, 0] = np.linspace(100.0, 10000.0, 20)
    flake[20:, 1] = 300.0
    g = pot.edges(flake, None, False)
    assert g.n_edges == 2 * (19 + 18)  # neighbours 2.4 and 4.8 Å apart along the chain
    # mdband run and mdband relax start from such a structure (their start-up checks too)
    ase.io.write("far.xyz", atoms)
    common = ["--structure", "far.xyz", "--model", "lj.mdband", "--device", "cpu"]
    res = CliRunner().invoke(main, ["run", *common, "--steps", "3", "--no-progress"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["relax", *common, "--output", "o.xyz", "--fmax", "100"])
    assert res.exit_code == 0, res.output
    print("ok")
    """
)


def test_an_atom_1e6_angstrom_away_does_not_kill_the_process(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", _FAR_ATOM], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", (out.returncode, out.stderr[-2000:])


_VESIN_GRID = textwrap.dedent(
    """
    import sys
    import numpy as np
    import vesin
    from mdband.graph import vesin_can_search

    ex, ey = float(sys.argv[1]), float(sys.argv[2])
    pos = np.array([[0, 0, 0], [ex, 0, 0], [0, ey, 0], [0, 0, 0.5]], dtype=float)
    safe = vesin_can_search(pos, np.zeros((3, 3)), [False] * 3, 1.0)
    print(safe, flush=True)
    vesin.NeighborList(cutoff=1.0, full_list=True).compute(
        points=pos, box=np.zeros((3, 3)), periodic=False, quantities="ij"
    )
    """
)


@pytest.mark.parametrize("extent", [(2000.0, 60.0), (300.0, 300.0)])
def test_vesin_is_used_only_where_its_grid_holds(extent):
    """The boxes :func:`vesin_can_search` sends to mdband's cell list are those that kill
    vesin 0.6 (SIGFPE); the others it searches."""
    out = subprocess.run(
        [sys.executable, "-c", _VESIN_GRID, *map(str, extent)], capture_output=True, text=True
    )
    assert out.stdout.strip() in ("True", "False"), out.stderr[-2000:]
    safe = out.stdout.strip() == "True"
    assert safe == (out.returncode == 0), (out.stdout, out.returncode)


def test_zero_atoms_give_the_empty_result(cuni):
    res = cuni.evaluate(np.zeros((0, 3)), np.eye(3) * 5.0, True, [])
    assert res.energy == 0.0 and res.forces.shape == (0, 3) and res.atom_energy.shape == (0,)
    assert not res.virial.any()
    atoms = Atoms(cell=np.eye(3) * 5.0, pbc=True)
    atoms.calc = Calculator(cuni)
    assert atoms.get_potential_energy() == 0.0
    assert atoms.get_forces().shape == (0, 3) and not atoms.get_stress().any()


def test_committee_checks_its_input_like_potential(cuni):
    committee = Committee([cuni, load_model("builtin:emt-cuni", device="cpu")])
    pos = np.random.default_rng(0).random((48, 2))
    with pytest.raises(StructureError, match=r"positions must have shape \(N, 3\), got \(48, 2\)"):
        committee.evaluate(pos, np.eye(3) * 9.0, True, ["Cu"] * 32)
    with pytest.raises(StructureError, match=r"positions must have shape"):
        cuni.evaluate(pos, np.eye(3) * 9.0, True, ["Cu"] * 32)
    with pytest.raises(StructureError, match="pbc must be True/False"):
        committee.evaluate(np.zeros((2, 3)), None, "False", ["Cu"] * 2)


def test_every_allocators_out_of_memory_is_recognised():
    import torch

    from mdband.errors import is_out_of_memory

    caught = []
    for allocate in (
        lambda: torch.empty(2**62, dtype=torch.uint8),
        lambda: np.empty(2**50, dtype=np.uint8),
    ):
        try:
            allocate()
        except (RuntimeError, MemoryError) as exc:
            caught.append(exc)
    assert len(caught) == 2 and all(is_out_of_memory(e) for e in caught)
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
