"""SO(3) geometry: real spherical harmonics, edge frames, Wigner-D rotations and their storage."""
