"""Write the example's model files: an argon-like Lennard-Jones model (``lj-argon.mdband``) and,
with ``--mp2``, the two-layer message-passing test model (``mp2-argon.mdband``).

Both are mdband model files, loaded by ``pair_style mdband`` exactly like a SeZM model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mdband.testing.lj import lennard_jones_potential
from mdband.testing.mp import message_passing_potential


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", default=str(Path(__file__).parent))
    parser.add_argument("--mp2", action="store_true", help="also write mp2-argon.mdband")
    args = parser.parse_args()
    out = Path(args.out_dir)
    lennard_jones_potential(type_map=["Ar"]).save(out / "lj-argon.mdband")
    print(f"wrote {out / 'lj-argon.mdband'}")
    if args.mp2:
        message_passing_potential(type_map=["Ar"]).save(out / "mp2-argon.mdband")
        print(f"wrote {out / 'mp2-argon.mdband'}")


if __name__ == "__main__":
    main()
