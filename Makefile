# Two entry points, each self-contained on a fresh machine: `make demo` and `make test`.
# The venv is isolated (no system site-packages): the tests see what setup.cfg declares and nothing
# the machine happens to have.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# The compiled replay's source is in the hash too: an editable install builds the extension once, so a
# changed _replay.c must reinstall (rebuild) it.
HASH := $(shell cat setup.cfg pyproject.toml setup.py cupygraph/backends/fastpath/_replay*.[ch] | cksum | cut -d' ' -f1)
comma := ,
# On a GPU machine (nvidia-smi answers), add CuPy's wheel for the driver's CUDA major version (12,
# else 13): the isolated venv cannot see a CuPy installed on the system.
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -n 1)
GPU_EXTRA := $(if $(CUDA_MAJOR),$(comma)$(if $(filter 12,$(CUDA_MAJOR)),cuda12,cuda13))
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="--randomly-seed=1234"` to replay an order.
PYTEST_ARGS ?=

.PHONY: demo test lint suite clean

# Each entry point installs only what it needs (the extras are in setup.cfg): the demo the package
# (and CuPy on a GPU machine); the tests also the test runner, the linters and NVRTC.
DEMO_EXTRAS := $(patsubst %,[%],$(patsubst $(comma)%,%,$(GPU_EXTRA)))
TEST_EXTRAS := [test,lint,cuda$(GPU_EXTRA)]
DEMO_STAMP := $(VENV)/.demo-$(HASH)
TEST_STAMP := $(VENV)/.test-$(HASH)

# A .venv left by an older Makefile may see system site-packages: make it again.
define install
	grep -qsx 'include-system-site-packages = false' $(VENV)/pyvenv.cfg || { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".$(1)"
	touch $@
endef

$(DEMO_STAMP):
	$(call install,$(DEMO_EXTRAS))

$(TEST_STAMP):
	$(call install,$(TEST_EXTRAS))

demo: $(DEMO_STAMP)
	$(PY) -m cupygraph demo

# `make test` = lint, then the suite. README.md ("Running the tests") lists these same commands and
# tests/unit/test_docs.py keeps the two in step; .ci/run calls `make test`.
test: lint suite

lint: $(TEST_STAMP)
	$(PY) -m ruff check cupygraph tests tools examples
	$(PY) -m mypy cupygraph

# Random module order (pytest-randomly) with the seed in the header, so an order dependence shows
# at once and can be replayed. Exit 5 (no test collected) fails loudly instead of passing quietly.
# A test whose optional extra is missing skips naming it (tests/extras.py), except for the extras
# installed here: those must work.
suite: export CUPYGRAPH_TEST_EXTRAS = $(subst [,,$(subst ],,$(TEST_EXTRAS)))
suite: $(TEST_STAMP)
	$(PY) -m pytest -p randomly $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5); failing"; fi; exit $$rc; }

clean:
	rm -rf $(VENV) build *.egg-info cupygraph/backends/fastpath/_replay*.so cupygraph/backends/_replay*.so
