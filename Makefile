# Two entry points, each self-contained on a fresh machine: `make demo` and `make test`.
# The venv sees system site-packages so a machine's preinstalled CuPy (GPU images) is used as is.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)
# On a GPU machine without CuPy, install the CUDA 13 wheel; where CuPy is already there, keep it.
GPU_EXTRA := $(shell $(PYTHON) -c "import cupy" 2>/dev/null || (command -v nvidia-smi >/dev/null 2>&1 && echo ,cuda13))

.PHONY: demo test lint clean

$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test$(GPU_EXTRA)]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m cupygraph demo

# Lint first: a type or lint error fails `make test` (and so CI) before the suite runs.
test: $(STAMP) lint
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check cupygraph tests tools examples
	$(PY) -m mypy cupygraph

clean:
	rm -rf $(VENV) build *.egg-info
