"""The torch path's block maps, one dense product against one small product per block.

Times forward and forward + backward of ``rotate_to_local``, ``rotate_back`` (with the ρ scale)
and the radial degree mixer (``degree_channel``, rank 1) in both forms of
``mdband.so3.storage.ONE_PRODUCT_DEVICES`` on one device, at the default config's shape (L = 3,
C = 64) and DPA4-Mini's (L = 2, C = 32), and checks that both forms agree. The CPU takes the one
product by default, CUDA the per-block products; run it on a GPU to decide CUDA's entry.

    python -m benchmarks.one_product [--device cpu|cuda] [--edges 34128] [--threads 1]

One JSON line per (map, shape) with the median milliseconds of each form (kind ``product``).
"""

from __future__ import annotations

import torch

from mdband import host_memory
from mdband.model.so2 import RadialDegreeMixer
from mdband.so3 import storage as st
from mdband.so3.wigner import rotation_storage

try:  # python -m benchmarks.one_product, or imported
    from benchmarks import harness
except ModuleNotFoundError as exc:  # python benchmarks/one_product.py: the harness beside it
    if exc.name != "benchmarks":
        raise
    import harness

SHAPES = {"default": (3, 64), "mini": (2, 32)}


def cases(L: int, C: int, E: int, device, dtype):
    """(name, forward function, inputs to differentiate, output cotangent) of each map."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device).requires_grad_()

    rs = rotation_storage(
        torch.randn(E, 3, generator=g, dtype=dtype).to(device), L, st.RotationLayout.BAND
    )
    band = rs.data.detach().clone().requires_grad_()
    D, Dm = st.dim_of(L), st.reduced_dim(L)
    x, xl, rad = rand(E, D, C), rand(E, Dm, C), rand(E, L + 1, C)
    rho = st.rotate_inv_rescale(L, dtype=dtype, device=device)
    mixer = RadialDegreeMixer(L, C, "degree_channel", 1).to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in mixer.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype).to(device) * 0.1)

    def storage():
        return st.RotationStorage(st.RotationLayout.BAND, L, band)

    return [
        ("rotate_to_local", lambda: st.rotate_to_local(storage(), x, L), (x, band), Dm),
        ("rotate_back", lambda: st.rotate_back(storage(), xl, L, rho), (xl, band), D),
        ("mixer", lambda: mixer(xl, rad), (xl, rad), Dm),
    ]


def main(argv=None) -> list[dict]:
    ap = harness.parser("one_product", __doc__, device="auto", threads=None, repeat=9, warmup=2)
    ap.add_argument("--edges", type=int, default=34128, help="34,128: 216 atoms of diamond")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument(
        "--host-memory",
        default="auto",
        choices=("auto", "keep", "system"),
        help="as a model on this device would set it (mdband.host_memory)",
    )
    args = ap.parse_args(argv)
    host_memory.apply(args.host_memory, args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    results = harness.Results("one_product", args.out, vars(args))
    clock = harness.timer.timer(device)
    saved = st.ONE_PRODUCT_DEVICES
    try:
        for shape in args.shapes:
            L, C = SHAPES[shape]
            for name, fwd, inputs, rows in cases(L, C, args.edges, device, torch.float32):
                gy = torch.randn(args.edges, rows, C, device=device)
                row = {"map": name, "shape": shape, "L": L, "C": C, "edges": args.edges}
                outs = {}
                for form, devices in (("one_product", {device.type}), ("per_block", set())):
                    st.ONE_PRODUCT_DEVICES = frozenset(devices)
                    outs[form] = fwd().detach()

                    def both(fwd=fwd, inputs=inputs, gy=gy):
                        return torch.autograd.grad(fwd(), inputs, gy)

                    for label, fn in (("fwd", fwd), ("fwd_bwd", both)):
                        t = clock.measure(fn, args.repeat, args.warmup)
                        row[f"{form}_{label}_ms"] = round(t.ms, 3)
                err = (outs["one_product"] - outs["per_block"]).abs().max().item()
                row["max_abs_difference"] = err
                results.add("product", **row)
    finally:
        st.ONE_PRODUCT_DEVICES = saved
    return results.of("product")


if __name__ == "__main__":
    main()
