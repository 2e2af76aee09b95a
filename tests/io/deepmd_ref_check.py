"""Run by the python of the deepmd-kit 3.2 reference venv (never by mdband's): checks
checkpoints that mdband exported, and prints one JSON line (a report per checkpoint).

    python deepmd_ref_check.py STRUCTURES.extxyz EXPORTED.pt[:ORIGINAL.pt] ...

* the model section is a fixed point of deepmd-kit's argcheck normalisation and passes its
  strict check;
* deepmd-kit's ``ModelWrapper`` loads the state dict strictly (as ``dp --pt freeze`` does);
* with ORIGINAL (the deepmd-kit checkpoint mdband imported), every tensor deepmd-kit builds
  from the config equals the original's, and the key sets are equal;
* ``DeepPot`` evaluates every frame of STRUCTURES: energies, forces and virials are printed
  for the test to compare with mdband's.
"""

import copy
import json
import sys

import numpy as np
import torch


def check(exported, structures, original=None):
    import ase.io
    from deepmd.infer import DeepPot
    from deepmd.pt.model.model import get_model
    from deepmd.pt.train.wrapper import ModelWrapper
    from deepmd.utils.argcheck import model_args

    report = {}
    sd = torch.load(exported, map_location="cpu", weights_only=True)["model"]
    params = sd["_extra_state"]["model_params"]
    margs = model_args()
    normalised = margs.normalize_value(copy.deepcopy(params), trim_pattern="_*")
    margs.check_value(normalised, strict=True)
    report["normalised_fixed_point"] = normalised == params
    wrapper = ModelWrapper(get_model(copy.deepcopy(params)), model_params=params)
    wrapper.load_state_dict(sd)  # strict
    report["strict_load"] = True
    if original is not None:
        ref = torch.load(original, map_location="cpu", weights_only=True)["model"]
        report["missing"] = sorted(set(ref) - set(sd))
        report["extra"] = sorted(set(sd) - set(ref))
        # out_std and version_tensor depend on training / on the stored version
        skip = ("out_std", "version_tensor")
        report["differ"] = sorted(
            k
            for k in set(ref) & set(sd)
            if k != "_extra_state"
            and not k.endswith(skip)
            and not (ref[k].shape == sd[k].shape and torch.equal(ref[k].to(sd[k].dtype), sd[k]))
        )
    dp = DeepPot(exported)
    type_map = dp.get_type_map()
    frames = []
    for atoms in ase.io.read(structures, index=":"):
        coord = atoms.positions.reshape(1, -1)
        cell = atoms.cell.array.reshape(1, 9) if atoms.pbc.any() else None
        atype = [type_map.index(s) for s in atoms.get_chemical_symbols()]
        e, f, v = dp.eval(coord, cell, atype)[:3]
        frames.append(
            {
                "energy": float(np.asarray(e).reshape(-1)[0]),
                "forces": np.asarray(f).reshape(-1, 3).tolist(),
                "virial": np.asarray(v).reshape(9).tolist(),
            }
        )
    report["frames"] = frames
    return report


if __name__ == "__main__":
    structures, pairs = sys.argv[1], sys.argv[2:]
    reports = {}
    for pair in pairs:
        exported, _, original = pair.partition(":")
        reports[exported] = check(exported, structures, original or None)
    print(json.dumps(reports))
