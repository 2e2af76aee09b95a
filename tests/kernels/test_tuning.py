"""The kernels' tuning table: frozen records, one validated context manager, nothing else."""

from __future__ import annotations

import dataclasses

import pytest

from mdband.kernels import tuning


def test_defaults_are_frozen_and_read_only():
    """Records and their mapping fields cannot be changed in place: only ``override`` changes
    what an op reads."""
    table = tuning.current()
    assert table is tuning.DEFAULTS
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.aggregate.bwd = "walk"
    with pytest.raises(TypeError):
        table.so2_stack.linear["tf32x3"] = tuning.LinearLaunch(edges=16, warps=4, stages=1)
    with pytest.raises(TypeError):
        table.grid_product.shapes[16] = (table.grid_product.fwd, table.grid_product.bwd)
    assert tuning.current() is tuning.DEFAULTS


def test_override_changes_fields_nests_and_restores():
    """Mappings of fields replace those fields, whole records replace the op's record; nested
    blocks stack and each block restores the table it found, also when it raises."""
    before = tuning.current()
    with tuning.override(aggregate={"bwd": "walk"}, zonal={"dot_edges": 8}) as outer:
        assert tuning.current() is outer
        assert outer.aggregate.bwd == "walk" and outer.zonal.dot_edges == 8
        assert outer.aggregate.walk_stages == before.aggregate.walk_stages  # the rest kept
        record = tuning.RotateMixTuning(bwd="edge", edge_warps=2)
        with tuning.override(rotate_mix=record, aggregate={"walk_stages": 2}) as inner:
            assert inner.rotate_mix is record
            assert inner.aggregate.bwd == "walk" and inner.aggregate.walk_stages == 2
        assert tuning.current() is outer
        with pytest.raises(RuntimeError), tuning.override(zonal={"bwd": "walk"}):
            raise RuntimeError("a test inside the block fails")
        assert tuning.current() is outer
    assert tuning.current() is before


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"aggregates": {"bwd": "walk"}}, "no op 'aggregates'"),
        ({"aggregate": {"backward": "walk"}}, "no field"),
        ({"aggregate": {"bwd": "tiles"}}, "AggregateTuning.bwd"),
        ({"aggregate": "walk"}, "a mapping of its fields"),
        ({"aggregate": tuning.ZonalTuning()}, "a mapping of its fields"),
        ({"aggregate": {"walk_warps": 3}}, "power of two"),
        ({"aggregate": {"walk_stages": 0}}, "≥ 1"),
        ({"rotate_mix": {"dot_precision": "tf32"}}, "dot_precision"),
        ({"seed_mlp": {"warps": 8}}, "warps"),
        ({"so2_stack": {"linear": {"tf32x3": tuning.LinearLaunch(16, 4, 2)}}}, "each of"),
        ({"so2_stack": {"shapes": {3: tuning.StackShape()}}}, r"\(L, C\)"),
        ({"so2_stack": {"presplit": ()}}, "non-empty"),
        ({"grid_product": {"shapes": {32: tuning.GridLaunch(32, 4)}}}, "pairs"),
        ({"cell_pairs": {"width": 6}}, "power of two"),
    ],
)
def test_bad_values_are_refused_before_anything_changes(changes, match):
    before = tuning.current()
    with pytest.raises(ValueError, match=match):
        with tuning.override(**changes):
            pass
    assert tuning.current() is before


def test_launch_records_check_their_values():
    with pytest.raises(ValueError, match="rows"):
        tuning.LinearLaunch(edges=64, warps=4, stages=2, rows=3)
    with pytest.raises(ValueError, match="power of two"):
        tuning.DotLaunch(edges=12)
    with pytest.raises(ValueError, match="split-mode keys"):
        tuning.StackShape(linear={"bf16": tuning.LinearLaunch(16, 4, 1)})
    with pytest.raises(ValueError, match="GateLaunch"):
        tuning.StackShape(gate=(16, 4, 4))


def test_per_shape_lookups():
    """The SO(2) stack's and the grid product's per-shape entries win over their defaults,
    the rest fall back to them."""
    stack = tuning.DEFAULTS.so2_stack
    assert stack.linear_launch("tf32x3", 2, 32) == tuning.LinearLaunch(256, 4, 3)
    assert stack.linear_launch("tf32x3", 3, 64) == stack.linear["tf32x3"]  # no tf32x3 entry
    assert stack.linear_launch("fp16x3", 3, 64).rows == 2
    assert stack.gate_launch(2, 32) == tuning.GateLaunch(16, 8, 2)
    assert stack.gate_launch(3, 64) == stack.gate
    grid = tuning.DEFAULTS.grid_product
    assert grid.launch("bwd", 96) == tuning.GridLaunch(16, 2)
    assert grid.launch("fwd", 192) == grid.fwd
