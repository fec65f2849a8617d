# curate: `make demo` installs what running needs (requirements.txt) and runs the shipped recipes (curate run) on the
# bundled sample data, offline; `make test` adds the optional stages and the test tools (requirements-dev.txt) and runs
# the tests. A CPU-only or another CUDA build of torch: `make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu`
# (docs/install.md).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
CURATE := $(VENV)/bin/curate
DEMO   := demo-out
TORCH_INDEX ?=
PIP_INSTALL := $(PIP) install --disable-pip-version-check
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false

.PHONY: setup setup-run test demo bench bench-quick sample-data clean

setup: $(VENV)/.installed
setup-run: $(VENV)/.runtime

# What running needs: requirements.txt and curate itself (torch first from TORCH_INDEX when it is given).
$(VENV)/.runtime: requirements.txt pyproject.toml
	@echo "== 1/2 a virtual environment in $(VENV) =="
	$(PYTHON) -m venv $(VENV)
ifneq ($(TORCH_INDEX),)
	@echo "== torch from $(TORCH_INDEX) =="
	$(PIP_INSTALL) --index-url $(TORCH_INDEX) $(shell grep -E '^torch(vision)?==' requirements.txt)
endif
	@echo "== 2/2 what running needs: requirements.txt (torch, open_clip, transformers...; pip lists each package) =="
	$(PIP_INSTALL) -r requirements.txt
	$(PIP_INSTALL) --no-deps --no-build-isolation -e .
	touch $@

# The tests: the optional stages (requirements/*.txt: vocab build, Ray, buckets, training side, serving) and test tools.
$(VENV)/.installed: $(VENV)/.runtime requirements-dev.txt $(wildcard requirements/*.txt)
	@echo "== what the tests add: requirements-dev.txt (optional stages in requirements/, pytest, emulators) =="
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

# Two test processes (pytest-xdist), a test file each at a time: its module fixtures (a Ray cluster, a server) stay
# in one process. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 tests

sample-data: setup
	$(PY) -m curate.fixtures.sampledata data/sample

demo: setup-run
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
