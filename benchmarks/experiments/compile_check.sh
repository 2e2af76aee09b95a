#!/usr/bin/env bash
# torch.compile of each kind of pure-torch module, then all of them, then compile=on (graph
# breaks at the fused ops), default config (experiments.gpu_profile's compile variants).
# On the device (repository root, .whl carried with the ase and vesin wheels):
#     OUT=... bash benchmarks/experiments/compile_check.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site2 .whl/ase-*.whl .whl/vesin-0*.whl
export PYTHONPATH=/tmp/site2:$PWD PYTHONUNBUFFERED=1
for v in modules:EquivariantFFN modules:EquivariantRMSNorm modules:SO3Linear modules:RadialMLP modules:FittingNet modules breaks; do
  timeout 150 python3 -m benchmarks.experiments.gpu_profile --configs default --sizes 4 8 --profile-size 0 --repeat 3 --variants $v > $OUT/compile-${v//:/-}.log 2>&1
  echo "$v rc $?"; grep "^{\"compile\"" $OUT/compile-${v//:/-}.log | cut -c1-400
done
