"""Small, fast potentials for tests and examples (not machine-learned)."""
