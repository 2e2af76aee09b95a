python3 -m pip install -q --no-index --no-deps --target /tmp/site2 .whl/ase-*.whl .whl/vesin-0*.whl
export PYTHONPATH=/tmp/site2:$PWD PYTHONUNBUFFERED=1
cd benchmarks
for v in modules:EquivariantFFN modules:EquivariantRMSNorm modules:SO3Linear modules:RadialMLP modules:FittingNet modules breaks; do
  timeout 150 python3 gpu_profile.py --configs default --sizes 4 8 --profile-size 0 --repeat 3 --variants $v > $OUT/compile-${v//:/-}.log 2>&1
  echo "$v rc $?"; grep "^{\"compile\"" $OUT/compile-${v//:/-}.log | cut -c1-400
done
