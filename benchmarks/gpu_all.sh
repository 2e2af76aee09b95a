#!/usr/bin/env bash
# Every GPU check and timing of mdband in one device call (about 5 minutes on an H200):
#   1. the fused SO(2) mixing layer: checks against float64 and the launch sweep (gpu_stack.py)
#   2. every other kernel: checks against its reference, band vs dense bitwise, timings
#   3. the model end to end: forces vs float64, band vs dense, CUDA-graph replays vs eager calls,
#      ms/call and peak memory at 512 and 4,096 atoms with and without graphs, an MD-like
#      sequence, the largest cell, a profile (gpu_model.py, using the sweep's best launch)
#   4. the MD driver: exact restarts with CUDA graphs, ms per MD step (gpu_md.py)
# Results go to $OUT/{stack,kernels,model}/*.json and logs to $OUT/*.log.
#
# On the device (repository root; .whl/ carried with the ase and vesin wheels, see gpu_lammps.sh,
# and for gpu_md.py the cp312 wheels of h5py, click, rich, markdown-it-py, mdurl and pygments:
#   .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_17_x86_64 -d .whl h5py click rich markdown-it-py mdurl pygments):
#   bash benchmarks/gpu_all.sh
set -uo pipefail
OUT=${OUT:-benchmarks/out}
mkdir -p "$OUT/stack" "$OUT/kernels" "$OUT/model"
if ! python3 -c "import ase, vesin, h5py, click, rich" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/ase-*.whl .whl/vesin-*.whl .whl/h5py-*.whl .whl/click-*.whl \
        .whl/rich-*.whl .whl/markdown_it_py-*.whl .whl/mdurl-*.whl .whl/pygments-*.whl || exit 2
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
status=0
OUT=$OUT/stack timeout 150 python3 benchmarks/gpu_stack.py --quick >"$OUT/stack.log" 2>&1 || status=1
grep -E "FAIL|TFLOP|torch path|PASSED|FAILED" "$OUT/stack.log"
OUT=$OUT/kernels timeout 180 python3 benchmarks/gpu_kernels.py --no-reference \
    >"$OUT/kernels.log" 2>&1 || status=1
grep -E "FAIL|checks:|worst|PASSED|FAILED" "$OUT/kernels.log"
timeout 60 python3 benchmarks/gpu_warps.py >"$OUT/warps.log" 2>&1 || status=1
cat "$OUT/warps.log"
OUT=$OUT/model timeout 300 python3 benchmarks/gpu_model.py \
    --stack-config "$OUT/stack/gpu_stack.json" --sizes 4 8 --largest 12 14 \
    --largest-variants band --variants band band-eager dense dense-eager band-recompute-stack \
    band-recompute --repeat 3 --quick --switch-size 12 >"$OUT/model.log" 2>&1 || status=1
sed -n '/== checks ==/,$p' "$OUT/model.log"
OUT=$OUT/model timeout 200 python3 benchmarks/gpu_md.py >"$OUT/md.log" 2>&1 || status=1
grep -E "^restart|^timing|CHECKS" "$OUT/md.log"
exit $status
