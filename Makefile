# disquepy — `make run` starts a local node, `make test` runs the test suite.
# Both bootstrap what they need: a virtualenv in .venv and the Debian packages the
# tests use (redis-server/redis-tools as the benchmark baseline and for redis-cli).

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COMPAT := .venv-compat
PORT ?= 7711

.PHONY: run cluster test lint bench deps clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,spark]'
	touch $(STAMP)

# pydisque 0.1.5 was released against redis-py 3.x: test it there too.
$(COMPAT)/.installed:
	$(PY) -m venv $(COMPAT)
	$(COMPAT)/bin/pip install -q 'redis==3.5.3' 'pydisque==0.1.5'
	touch $@

deps:
	@command -v redis-cli >/dev/null && command -v redis-server >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server redis-tools >/dev/null; }

run: $(STAMP)
	$(BIN)/disque-server --port $(PORT)

# three nodes on 7711-7713 (bus on 17711-17713), joined; Ctrl-C stops all three
cluster: $(STAMP)
	$(BIN)/python scripts/cluster.py --nodes 3 --port $(PORT)

test: $(STAMP) $(COMPAT)/.installed deps
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/python -m pytest -p no:cacheprovider tests

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts

bench: $(STAMP) deps
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(COMPAT) bench/loadgen
