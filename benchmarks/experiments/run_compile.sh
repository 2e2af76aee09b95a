#!/usr/bin/env bash
# `mdband run` of DPA4-Mini (random weights, 4,096 atoms of diamond, nvt-langevin, trajectory
# every 100 steps) with --compile off and on: the run's own ms/step and its model/rest split.
# On the device (repository root, .whl carried with the ase and vesin wheels):
#     STEPS=1000 COMPILES="off on" bash benchmarks/experiments/run_compile.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/ase-*.whl .whl/vesin-0*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
work=$(mktemp -d)
python3 - "$work" <<'PY'
import sys
from ase.io import write
from benchmarks.harness import diamond, models
models.potential(models.config("mini"), dtype="float64").save(f"{sys.argv[1]}/mini.mdband")
write(f"{sys.argv[1]}/d8.extxyz", diamond(8), format="extxyz")
PY
for c in ${COMPILES:-off on}; do
    timeout 200 python3 -m mdband.cli run --structure "$work/d8.extxyz" --model "$work/mini.mdband" \
        --device cuda --ensemble nvt-langevin --temperature 300 --steps "${STEPS:-1000}" \
        --traj-every 100 --trajectory "$work/t-$c.h5" --log "$work/run-$c.log" --no-progress \
        --seed 1 --guard-distance 0 --max-temperature 0 --compile "$c" >"$work/out-$c.txt" 2>&1
    echo "compile=$c rc=$?"
    grep -E "Engine|Time per step|steps/s" "$work/out-$c.txt"
done
