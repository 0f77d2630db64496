# The README's two quick-start commands: `make run` and `make test`.
# `make run` installs the core package only (`pip install -e .`: no PySpark, no test
# tools); `make test` and `make bench` add the extras they use, each behind its own stamp.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SOURCES := setup.cfg setup.py pyproject.toml mq/records/_speedups.c
CORE := $(VENV)/.core
STAMP := $(VENV)/.installed
BENCH := $(VENV)/.bench

.PHONY: run test lint unit bench clean

$(BIN)/pip:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# the broker, the client and the CLI
$(CORE): $(SOURCES) | $(BIN)/pip
	$(BIN)/pip install --quiet -e .
	touch $(CORE)

# what `make test` and `make lint` use: pytest, ruff, mypy, import-linter, etcd, PySpark
$(STAMP): $(SOURCES) | $(BIN)/pip
	$(BIN)/pip install --quiet -e '.[spark,test,dev]'
	touch $(CORE) $(STAMP)

# the peers the benchmark suite compares against, and its charts
$(BENCH): $(STAMP)
	$(BIN)/pip install --quiet -e '.[spark,test,dev,bench]'
	touch $(BENCH)

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

bench: $(BENCH)
	$(BIN)/python -m benchmarks --peers --chart benchmarks/results/comparison.png \
		--markdown benchmarks/results/comparison.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
