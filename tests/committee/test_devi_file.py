"""model_devi.out: deepmd-kit's header and widths, loadtxt, crash-safe resume."""

import numpy as np
import pytest

from mdband.committee import ModelDeviation, ModelDeviFileError, ModelDeviWriter, read_model_devi
from mdband.committee.devi_file import format_row, header

# pair_style deepmd's header, character for character
DEEPMD_HEADER = (
    "#       step         max_devi_v         min_devi_v         avg_devi_v"
    "         max_devi_f         min_devi_f         avg_devi_f\n"
)


def devi(x, n=3):
    return ModelDeviation(x, x / 2, x / 3, 10 * x, x, 5 * x, devi_f=np.linspace(x, 2 * x, n))


def test_header_and_row_layout():
    assert header() == DEEPMD_HEADER
    assert header(atomic=True) == DEEPMD_HEADER[:-1] + "      atm_devi_f(N)\n"
    row = format_row(120, devi(0.0123456789))
    assert row == (
        "         120       1.234568e-02       6.172839e-03       4.115226e-03"
        "       1.234568e-01       1.234568e-02       6.172839e-02\n"
    )
    assert len(format_row(0, devi(1.0), atomic=True)) == 12 + 19 * 9 + 1


@pytest.mark.parametrize("atomic", [False, True])
def test_file_parses_with_loadtxt(tmp_path, atomic):
    path = tmp_path / "model_devi.out"
    with ModelDeviWriter.create(path, atomic=atomic) as w:
        for step in (0, 10, 20):
            assert w.write(step, devi(1e-3 * (step + 1)))
        assert not w.write(20, devi(5.0))  # a step already in the file is not written twice
    text = path.read_text()
    assert text.startswith("#")
    data = np.loadtxt(path)
    assert data.shape == (3, 7 + 3 * atomic)
    np.testing.assert_array_equal(data[:, 0], [0, 10, 20])
    np.testing.assert_allclose(data[2, 1:7], devi(0.021).row(), rtol=1e-6)
    np.testing.assert_array_equal(read_model_devi(path), data)


def test_existing_file_refused_unless_overwrite(tmp_path):
    path = tmp_path / "model_devi.out"
    path.write_text("precious\n")
    with pytest.raises(ModelDeviFileError, match="exists"):
        ModelDeviWriter.create(path)
    assert path.read_text() == "precious\n"
    ModelDeviWriter.create(path, overwrite=True).close()
    assert path.read_text() == DEEPMD_HEADER


def test_resume_drops_rows_after_the_step_and_a_partial_row(tmp_path):
    straight, split = tmp_path / "straight.out", tmp_path / "split.out"
    with ModelDeviWriter.create(straight) as w:
        for step in range(0, 50, 10):
            w.write(step, devi(step + 1.0))
    with ModelDeviWriter.create(split) as w:
        for step in range(0, 40, 10):
            w.write(step, devi(step + 1.0))
    with open(split, "a") as fh:
        fh.write("          40       1.0000")  # killed while writing a row after step 20
    with ModelDeviWriter.resume(split, through_step=20) as w:
        assert w.last_step == 20
        for step in (20, 30, 40):
            w.write(step, devi(step + 1.0))
    assert split.read_text() == straight.read_text()


def test_resume_refuses_another_layout(tmp_path):
    path = tmp_path / "model_devi.out"
    ModelDeviWriter.create(path, atomic=True).close()
    with pytest.raises(ModelDeviFileError, match="per-atom"):
        ModelDeviWriter.resume(path, 0, atomic=False)
    path.write_text("not a model deviation file\n")
    with pytest.raises(ModelDeviFileError):
        ModelDeviWriter.resume(path, 0)


def test_second_writer_is_refused(tmp_path):
    path = tmp_path / "model_devi.out"
    with ModelDeviWriter.create(path):
        with pytest.raises(ModelDeviFileError, match="another process"):
            ModelDeviWriter.create(path, overwrite=True)
        with pytest.raises(ModelDeviFileError, match="another process"):
            ModelDeviWriter.resume(path, 0)
    assert path.read_text() == DEEPMD_HEADER
    ModelDeviWriter.resume(path, 0).close()
