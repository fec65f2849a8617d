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
	@echo "== curate pack: exact token counts, packed WebDataset shards =="
	$(CURATE) pack data/sample/records.jsonl data/sample/llava.jsonl data/sample/captions.jsonl \
		--processor $(DEMO)/models/processor --ctx 8192 --out $(DEMO)/pack
	$(CURATE) verify $(DEMO)/pack
	@echo "== curate balance: concept tags and inverse-frequency resampling (tiny random CLIP: tags are not meaningful) =="
	$(CURATE) balance data/sample/records.jsonl data/sample/llava.jsonl data/sample/captions.jsonl \
		--vocab vocab/500k.txt --model local-dir:$(DEMO)/models/clip --cache-dir $(DEMO)/cache --out $(DEMO)/balance
	@echo "== curate recaption: English and Chinese captions (tiny random VLM: most captions fail the checks) =="
	$(CURATE) recaption $(DEMO)/balance/records --model $(DEMO)/models/vlm --langs en,zh --max-new-tokens 32 \
		--out $(DEMO)/recaption
	@echo "== curate rl-filter: pass@N / pass@1 selection (tiny random VLM) =="
	$(CURATE) rl-filter data/sample/rl/prompts.jsonl --model $(DEMO)/models/vlm --n 4 --max-new-tokens 32 \
		--out $(DEMO)/rl-filter
	@echo
	@echo "demo outputs: $(DEMO)/pack/shards/ and $(DEMO)/pack/packing.png, $(DEMO)/balance/balance.png,"
	@echo "              $(DEMO)/recaption/captions.parquet, $(DEMO)/rl-filter/rl_filter.png"

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(DEMO) .pytest_cache
