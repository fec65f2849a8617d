# curate: `make demo` installs and runs the shipped recipes (curate run) on the bundled sample data, offline;
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

.PHONY: setup test demo bench bench-quick sample-data clean

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
	@echo "== curate run recipes/llava-ov-midtraining.yaml: dedup -> balance -> recaption en/zh -> pack at 8192 -> verify =="
	@echo "   (tiny random models: concept tags are random and most captions fail their checks)"
	$(CURATE) run recipes/llava-ov-midtraining.yaml --set models=$(DEMO)/models --set cache=$(DEMO)/cache --out $(DEMO)/run
	@echo "== curate run recipes/rl-selection.yaml: rl-filter (pass@N / pass@1) -> score =="
	$(CURATE) run recipes/rl-selection.yaml --set models=$(DEMO)/models --out $(DEMO)/rl
	@echo
	@echo "reports (open in a browser, no server needed): $(DEMO)/run/report/index.html  $(DEMO)/rl/report/index.html"
	@echo "recipe settings and versions: $(DEMO)/run/recipe.lock.yaml  $(DEMO)/rl/recipe.lock.yaml"

bench: setup
	$(PY) benchmarks/run_all.py

bench-quick: setup  # every benchmark on small inputs (about 8 min): do they still run? (figures are not meaningful)
	$(PY) benchmarks/run_all.py --quick

clean:
	rm -rf $(DEMO) .pytest_cache
