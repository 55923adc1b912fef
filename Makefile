# Two entry points, each self-contained on a fresh machine: `make demo` and `make test`.
# The venv sees system site-packages so a machine's preinstalled CuPy (GPU images) is used as is.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat setup.cfg pyproject.toml | cksum | cut -d' ' -f1)
# On a GPU machine without CuPy, install the CUDA 13 wheel; where CuPy is already there, keep it.
GPU_EXTRA := $(shell $(PYTHON) -c "import cupy" 2>/dev/null || (command -v nvidia-smi >/dev/null 2>&1 && echo ,cuda13))
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="--randomly-seed=1234"` to replay an order.
PYTEST_ARGS ?=

.PHONY: demo test lint suite clean

$(STAMP):
	test -x $(PY) || $(PYTHON) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[test$(GPU_EXTRA)]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m cupygraph demo

# `make test` = lint, then the suite. README.md ("Running the tests") lists these same commands and
# tests/test_docs.py keeps the two in step; .ci/run calls `make test`.
test: lint suite

lint: $(STAMP)
	$(PY) -m ruff check cupygraph tests tools examples
	$(PY) -m mypy cupygraph

# Random module order (pytest-randomly) with the seed in the header, so an order dependence shows
# at once and can be replayed. Exit 5 (no test collected) fails loudly instead of passing quietly.
suite: $(STAMP)
	$(PY) -m pytest -p randomly $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); failing"; fi; exit $$rc; }

clean:
	rm -rf $(VENV) build *.egg-info
