# curate: `make demo` installs and runs the main job on the bundled sample data, offline;
# `make test` installs and runs the tests.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CURATE := $(VENV)/bin/curate
DEMO   := demo-out
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false

.PHONY: setup test demo bench sample-data clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PIP) install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

test: setup
	$(PY) -m pytest -q --durations=15 tests

sample-data: setup
	$(PY) -m curate.fixtures.sampledata data/sample

demo: setup
	$(PY) -m curate.fixtures build-all $(DEMO)/models
	$(CURATE) pack data/sample/records.jsonl data/sample/llava.jsonl --processor $(DEMO)/models/processor \
		--ctx 8192 --out $(DEMO)/pack
	$(CURATE) verify $(DEMO)/pack

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(DEMO) .pytest_cache
