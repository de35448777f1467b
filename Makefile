# Two commands matter (see README): `make quickstart` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
DATA ?= ../shared/data
QUICKSTART_DB ?= .mycelian/quickstart.db

.PHONY: quickstart test install install-test embeddings bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e .

install-test: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e '.[test]'

## Set up and run the main job offline: replay the example conversation into the embedded server, show it.
quickstart: install
	rm -f $(QUICKSTART_DB) $(QUICKSTART_DB)-wal $(QUICKSTART_DB)-shm
	$(BIN)/mycelian-agent replay examples/quickstart_conversation.json --db $(QUICKSTART_DB) --memory quickstart
	$(BIN)/mycelian-agent show --db $(QUICKSTART_DB) --memory quickstart
	$(BIN)/mycelian-agent search "When is the Lisbon trip?" --db $(QUICKSTART_DB) --memory quickstart

## Install test dependencies and run the test suite.
test: install-test
	$(BIN)/python -m pytest -q

## Optional dense embeddings (torch pinned first: an unpinned torch pulls several GB of CUDA wheels).
embeddings: install
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[embeddings]'

## The benchmark suite at small sizes (full size: drop --quick; see BENCHMARKS.md).
bench: $(BIN)/python
	$(PIP) install --quiet --disable-pip-version-check -e '.[bench]'
	$(BIN)/mycelian-agent bench suite --quick --data $(DATA) --out bench-out

clean:
	rm -rf $(VENV) .mycelian .pytest_cache
