"""Shared memory of a model's grid-product launches on a GPU, found on the CPU (no GPU needed).

A random-weight model of a harness config (``plus``, ``neo``, ``default``, ``mini``) is evaluated
in float32 on a small diamond cell with the device predicates patched to a compute-capability
``--arch`` GPU (TF32, TMA) and every Triton launch recorded, not run (outputs are garbage: only
the launches matter). Each distinct ``grid_product`` launch is then compiled by Triton for that
target, at the tuning table's channels per program and at 16 (the fallback's floor), and its
``metadata.shared`` compared with ``--limit`` bytes (an H100's or H200's opt-in maximum per
block, 232,448). A launch over the limit raises OutOfResources on the GPU, where
``grid_product`` halves the channels per program and, at 16, computes the pass with torch GEMMs.

    python -m benchmarks.experiments.shared_memory [--config plus] [--arch 90]

One record per launch (kind ``shared_memory``).
"""

from __future__ import annotations

import copy

import torch

from benchmarks import harness


def _model(name: str):
    from benchmarks.harness import models
    from mdband.io.deepmd_params import config_from_deepmd
    from mdband.model.factory import build_sezm, initialise_weights
    from mdband.potential import Potential

    if name in models.PRESETS:
        section = models.deepmd_sections([name], mini_json=None)[name]
        cfg = config_from_deepmd(copy.deepcopy(section), models.DEEPMD_VERSION).to_dict()
    else:
        cfg = models.config(name)
    model = build_sezm(cfg, None, {"kernels": "ops"})
    initialise_weights(model, seed=0, gain=0.5)
    return Potential(
        model, kind="sezm", type_map=list(cfg["type_map"]), cutoff=cfg["rcut"], config=cfg,
        dtype="float32",
    )  # fmt: skip


def _record_launches(pot, monkeypatch_targets) -> list:
    """Evaluate ``pot`` once with the GPU predicates patched; the grid-product launches made."""
    from ase.build import bulk

    from mdband.kernels import _common as cm

    launches = []

    def wrap(kernel):
        class Launcher:
            def __getitem__(self, grid):
                def run(*args, **kw):
                    if kernel.__name__.startswith("grid_product"):
                        launches.append((kernel, args, kw))

                return run

        return Launcher()

    saved = {(obj, name): getattr(obj, name) for obj, name, _ in monkeypatch_targets}
    for obj, name, value in monkeypatch_targets:
        setattr(obj, name, value)
    old_wrap, cm.wrap = cm.wrap, wrap
    try:
        atoms = bulk("C", "diamond", a=3.57, cubic=True)
        atoms.rattle(0.05, seed=1)
        with cm.force_triton():
            pot.evaluate(atoms.positions, atoms.cell.array, True, species=["C"] * len(atoms))
    finally:
        cm.wrap = old_wrap
        for (obj, name), value in saved.items():
            setattr(obj, name, value)
    return launches


def _shared_bytes(kernel, args, meta, arch: int) -> int:
    """Compile ``kernel`` for ``sm{arch}`` with the recorded arguments; its shared memory."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    fn = JITFunction(getattr(kernel, "fn", kernel))
    names = [p.name for p in fn.params]
    signature, constexprs = {}, {}
    for name, value in zip(names, args):
        is_int = isinstance(value, int)
        signature[name] = (
            "*fp32" if isinstance(value, torch.Tensor) else "i32" if is_int else "fp64"
        )
    for name, value in meta.items():
        if name in names:
            signature[name] = "constexpr"
            constexprs[(names.index(name),)] = value
    options = {k: v for k, v in meta.items() if k in ("num_warps", "num_stages")}
    source = ASTSource(fn, signature=signature, constexprs=constexprs)
    return triton.compile(
        source, target=GPUTarget("cuda", arch, 32), options=options
    ).metadata.shared


def main(argv=None) -> None:
    from mdband.kernels import _common as cm
    from mdband.kernels import grid_product as gp

    ap = harness.parser("experiments.shared_memory", __doc__)
    ap.add_argument("--config", default="plus", help="a harness config or preset name")
    ap.add_argument("--arch", type=int, default=90, help="compute capability ×10 (90: sm90)")
    ap.add_argument("--limit", type=int, default=232448, help="shared memory per block, bytes")
    args = ap.parse_args(argv)
    results = harness.Results("experiments.shared_memory", args.out, vars(args), echo=False)
    gpu = args.arch >= 80
    targets = [
        (cm, "interpret_mode", lambda: False),
        (cm, "triton_available", lambda device: True),
        (cm, "has_tf32_cores", lambda device: gpu),
        (cm, "has_tma", lambda device: args.arch >= 90),
        (gp, "_precision", lambda x, exact: int(gpu and not exact and x.dtype == torch.float32)),
    ]
    launches = _record_launches(_model(args.config), targets)
    distinct = {}
    for kernel, launch_args, meta in launches:
        distinct.setdefault((kernel.__name__, tuple(sorted(meta.items()))), (kernel, launch_args))
    for (name, meta_items), (kernel, launch_args) in distinct.items():
        meta = dict(meta_items)
        t, b, left = launch_args[0], launch_args[1], launch_args[2]
        for channels in (meta["BLOCK_CHANNELS"], 16):
            shared = _shared_bytes(
                kernel, launch_args, dict(meta, BLOCK_CHANNELS=channels), args.arch
            )
            results.add(
                "shared_memory", config=args.config, kernel=name, arch=args.arch,
                t_shape=list(t.shape), b_shape=list(b.shape), left_shape=list(left.shape),
                meta=dict(meta, BLOCK_CHANNELS=channels), shared=shared,
                fits=shared <= args.limit,
            )  # fmt: skip
            fit = "fits" if shared <= args.limit else "over"
            print(f"{name} T{tuple(t.shape)} B{tuple(b.shape)} C/prog {channels}: {shared} B {fit}")


if __name__ == "__main__":
    main()
