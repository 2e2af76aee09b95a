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
	$(BIN)/pip install -q -e ".[dev]"
	touch $(BIN)/mdband

lint: install
	$(BIN)/ruff check mdband tests benchmarks examples
	$(BIN)/ruff format --check mdband tests benchmarks examples

format: install
	$(BIN)/ruff format mdband tests benchmarks examples
	$(BIN)/ruff check --fix mdband tests benchmarks examples

test: install lint
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -x --durations=15 tests

clean:
	rm -rf $(VENV) build *.egg-info
