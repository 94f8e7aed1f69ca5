# Idempotent targets: each re-uses .venv when it is already installed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install browser test demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test,faiss,embed,ray,view,interop]"
	touch $(STAMP)

# The viewer's browser tests drive Debian's chromium + chromium-driver (they skip, saying why, without them).
browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
		{ command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium chromium-driver >/dev/null) || \
		echo "note: chromium/chromium-driver not installed; the viewer's browser tests will skip"; }

test: install browser
	$(BIN)/python -m pytest

demo: install
	$(BIN)/kbvqa demo --out results/demo

bench: install
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) results build *.egg-info src/*.egg-info
