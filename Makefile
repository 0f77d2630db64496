# The README's two quick-start commands: `make run` and `make test`.
# `make run` installs the core package only (`pip install -e .`: no PySpark, no test
# tools); `make test`, `make lint` and `make bench` add the extras, behind their own stamp
# (the tests cover the Spark connector and the benchmarks' charts, so they need them all).

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SOURCES := setup.cfg setup.py pyproject.toml mq/records/_speedups.c
CORE := $(VENV)/.core
STAMP := $(VENV)/.installed

.PHONY: run test lint unit bench clean

$(BIN)/pip:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# the broker, the client and the CLI
$(CORE): $(SOURCES) | $(BIN)/pip
	$(BIN)/pip install --quiet -e .
	touch $(CORE)

# what `make test`, `make lint` and `make bench` use: pytest, ruff, mypy, import-linter,
# etcd, PySpark, the benchmark peers' clients and matplotlib
$(STAMP): $(SOURCES) | $(BIN)/pip
	$(BIN)/pip install --quiet -e '.[spark,test,dev,bench]'
	touch $(CORE) $(STAMP)

run: $(CORE)
	$(BIN)/mq serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# lint and the tests both run, whatever the other's result; either failing fails
test: $(STAMP)
	@lint=0; tests=0; \
	$(MAKE) --no-print-directory lint || lint=$$?; \
	$(BIN)/pytest || tests=$$?; \
	echo "lint: $$([ $$lint = 0 ] && echo passed || echo FAILED)," \
		"tests: $$([ $$tests = 0 ] && echo passed || echo FAILED)"; \
	[ $$lint = 0 ] && [ $$tests = 0 ]

bench: $(STAMP)
	$(BIN)/python -m benchmarks --peers --chart benchmarks/results/comparison.png \
		--markdown benchmarks/results/comparison.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
