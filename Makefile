# Idempotent targets: each re-uses .venv when it is already installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,faiss,embed,ray]"
	touch $(STAMP)

test: install
	$(BIN)/python -m pytest

demo: install
	$(BIN)/kbvqa demo --out results/demo

bench: install
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
