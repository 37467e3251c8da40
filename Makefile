# Two commands do all the set-up on a fresh machine:
#   make demo   install (first time) and run the demo job end to end (2 Ray actors, offline)
#   make test   install (first time) and run the tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch first, pinned, so the open range in pyproject is already met (CPU build where a
# local wheel is provided, the default PyPI build elsewhere); set TORCH_SPEC= to skip.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-fast lint format bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(if $(TORCH_SPEC),$(BIN)/python -m pip install -q "$(TORCH_SPEC)")
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

demo: install
	HF_HUB_OFFLINE=1 $(BIN)/mixscope run jobs/demo.yaml
	@echo ""
	@echo "Next, try (after: source $(BIN)/activate):"
	@echo "  mixscope report results/demo -o demo.html         # tables and figures, one HTML page"
	@echo "  mixscope query results/demo layer_profile         # a named analysis (mixscope queries)"
	@echo "  mixscope run --corpus my_texts.txt --measures all --name mine --out results/mine"
	@echo "                                                    # your own corpus: README, three commands"

# every tier (fast, slow, e2e); the reliability matrix table is rewritten from this run
test: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/mypy
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m "" --durations=25 --reliability-report=docs/reliability.md

# the fast tier only (no real model, no Ray cluster, no whole jobs): seconds, for editing
test-fast: install
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

format: install
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/ruff check --fix src tests benchmarks

bench: install
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/engine.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/decoder.py --decoder gpt2 --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/decoder.py --decoder llama --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/decoder.py --decoder gemma3 --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/decoder.py --decoder olmo2 --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/attention.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/attention.py --decoder gemma3,olmo2 --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/ff.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/host.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/storage.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/pipeline.py --detail none --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/elastic.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/startup.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/efficiency.py --save
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/sql.py --save
	$(BIN)/python benchmarks/readme.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache src/*.egg-info
