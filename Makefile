# The README's two quick-start commands: `make run` and `make test`.
# Both create .venv on first use and install the package with its extras.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint unit bench clean

$(STAMP): setup.cfg setup.py pyproject.toml mq/records/_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[spark,test,dev,bench]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/mq serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks --peers --chart benchmarks/results/comparison.png \
		--markdown benchmarks/results/comparison.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
