"""Time mdband's ``Potential.evaluate`` against deepmd-kit's ``DeepPot.eval`` (CPU).

Each engine runs in its own fresh process (so peak RSS is its own) on the same checkpoint and
frame, energy + forces + virial per call. Prints median ms, peak RSS and the ratio as JSON.

    python benchmarks/cpu_vs_deepmd.py --model CKPT.pt --system DEEPMD_DIR \
        --deepmd-python /path/to/deepmd-venv/bin/python [--repeat 20] [--threads 2]

``--system`` is a deepmd npy system (type.raw, type_map.raw, set.000/coord.npy, box.npy); the
first frame is used. ``--deepmd-python`` is an interpreter with deepmd-kit 3.2 installed (e.g. the
one ``../shared/tools/deepmd-reference`` builds).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORKER = r"""
import json, resource, sys, time, numpy as np, torch
torch.set_num_threads(int(sys.argv[4]))
engine, model, system, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[5])
coord = np.load(system + "/set.000/coord.npy")[0].reshape(-1, 3)
box = np.load(system + "/set.000/box.npy")[0].reshape(3, 3)
atype = np.loadtxt(system + "/type.raw", dtype=int).reshape(-1)
tmap = open(system + "/type_map.raw").read().split()
if engine == "mdband":
    import mdband
    pot = mdband.load_model(model, dtype=sys.argv[6])
    sym = [tmap[t] for t in atype]
    call = lambda: pot.evaluate(coord, box, True, sym)
else:
    from deepmd.infer import DeepPot
    dp = DeepPot(model)
    dtm = dp.get_type_map()
    at = np.array([dtm.index(tmap[t]) for t in atype])
    call = lambda: dp.eval(coord.reshape(1, -1), box.reshape(1, 9), at)
for _ in range(3):
    call()
ts = []
for _ in range(repeat):
    t0 = time.perf_counter(); call(); ts.append(time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
print("RESULT", json.dumps({"engine": engine, "median_ms": 1e3 * float(np.median(ts)),
      "peak_rss_mb": rss, "n_atoms": int(len(atype))}))
"""


def run(python, engine, args):
    cmd = [
        python,
        "-c",
        WORKER,
        engine,
        args.model,
        args.system,
        str(args.threads),
        str(args.repeat),
        args.dtype,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--system", required=True)
    ap.add_argument("--deepmd-python", required=True)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args()
    mine = run(sys.executable, "mdband", args)
    ref = run(args.deepmd_python, "deepmd", args)
    print(
        json.dumps(
            {
                "mdband": mine,
                "deepmd": ref,
                "time_ratio_mdband_over_deepmd": mine["median_ms"] / ref["median_ms"],
                "rss_ratio": mine["peak_rss_mb"] / ref["peak_rss_mb"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
