# disquepy — `make run` starts a local node and its dashboard, `make test` runs the test
# suite. Both bootstrap what they need: a virtualenv in .venv (`make run` only what a node
# and disque-web need) and the Debian packages the tests use (redis-server/redis-tools as
# the benchmark baseline and for redis-cli; chromium and chromium-driver for the
# dashboard's browser tests).

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# BASE: what a node and disque-web need (`make run`, `make cluster`: the package and its
# web extra); STAMP: everything the tests, lint and benchmarks need on top (the dev and
# spark extras, ~750 MB with pyspark; the celery extra and kombu's integration tests, from
# its sdist: tests/celery/kombu_suite.py)
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# the compiled parts (see setup.py): the C request reader and the hot path compiled by
# mypyc, rebuilt when their sources change. Here a mypyc failure is an error
# (DISQUEPY_REQUIRE_MYPYC); a plain `pip install` without a compiler goes on interpreted.
EXT := $(VENV)/.ext-built
EXT_SRC := src/disquepy/codec/_creader.c src/disquepy/codec/resp.py setup.py \
	$(wildcard src/disquepy/core/*.py src/disquepy/core/commands/*.py)
export DISQUEPY_REQUIRE_MYPYC ?= 1
COMPAT := .venv-compat
PEERS := .venv-peers
PORT ?= 7711
WEB_PORT ?= 8000
# the handler `make run`'s worker runs on the HTTP API's jobs (module:function, found in
# the current directory or on PYTHONPATH): `make run HANDLER=myworker:handle`
HANDLER ?= disquepy.worker.example:handle

.PHONY: run cluster test test-fast test-interpreted typecheck lint bench deps builddeps java clean

$(BIN)/python: | builddeps
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# each install builds the compiled parts once (and stamps them); the full one stands for
# the light one too, so `make test` on a fresh clone builds once and `make run` after it
# installs nothing
$(BASE): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install -q -e '.[web]'
	touch $(BASE) $(EXT)

$(STAMP): pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install -q -e '.[web,dev,spark,celery]'
	$(BIN)/python tests/celery/kombu_suite.py
	touch $(BASE) $(STAMP) $(EXT)

# (mypy, for mypyc, comes with the isolated build's requirements: `make run` stays light)
# make may decide that this stamp is stale before an install above runs, builds and
# touches it: build here only if a source is still newer (not twice on a fresh clone)
$(EXT): $(EXT_SRC) | $(BIN)/python
	@if [ ! -e $@ ] || [ -n "$$(find $(EXT_SRC) -newer $@)" ]; then \
	  echo "$(BIN)/pip install -q --no-deps -e ."; $(BIN)/pip install -q --no-deps -e . && touch $@; \
	fi

# pydisque 0.1.5 was released against redis-py 3.x: test it there too.
$(COMPAT)/.installed:
	$(PY) -m venv $(COMPAT)
	$(COMPAT)/bin/pip install -q 'redis==3.5.3' 'pydisque==0.1.5'
	touch $@

# Celery, RQ and Dramatiq for bench/peers.py (make bench's peers section): the systems the
# worker is compared with, in a virtualenv of their own; they are not dependencies of
# disquepy, and their pins must not move the project's (redis-py, kombu...)
$(PEERS)/.installed:
	$(PY) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q 'celery[redis]>=5.5,<6' 'rq>=2,<3' 'dramatiq[redis]>=1.17,<3' \
	  hiredis
	touch $@

# a C compiler and Python's headers build the request reader (codec/_creader.c)
builddeps:
	@command -v cc >/dev/null && $(PY) -c "import os, sys, sysconfig; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))" \
	|| { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq gcc python3-dev >/dev/null; }

deps:
	@command -v redis-cli >/dev/null && command -v redis-server >/dev/null \
	  && command -v chromium >/dev/null && command -v chromedriver >/dev/null \
	  && command -v openssl >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server redis-tools \
	    chromium chromium-driver openssl >/dev/null; }

# Spark (pyspark 4: the Spark tests, `disque analytics`) runs on a Java 17+ JVM: Debian's
# headless JRE (17 on bookworm, 21 where 17 is gone)
java:
	@$(PY) src/disquepy/spark/java.py 2>/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && { \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-17-jre-headless || \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-21-jre-headless; \
	  } >/dev/null; }

# one node on $(PORT), disque-web on $(WEB_PORT) (the dashboard's URL is printed) and a
# worker running $(HANDLER) on the API's queue; Ctrl-C stops all three
run: $(BASE) $(EXT)
	$(BIN)/python scripts/cluster.py --nodes 1 --port $(PORT) --dir var/run --web $(WEB_PORT) \
	  --worker $(HANDLER)

# three nodes on 7711-7713 (bus on 17711-17713), joined; a node that exits (killed to
# watch a failover) is started again 10 s later and rejoins; Ctrl-C stops all three
cluster: $(BASE) $(EXT)
	$(BIN)/python scripts/cluster.py --nodes 3 --port $(PORT)

# Test tiers (markers set by directory in tests/conftest.py): `fast` (tests/unit,
# tests/sim: the core, the codecs, the simulator and the shell in process; no network
# socket, Spark or browser), `server` (real processes on loopback ports), `spark`,
# `browser`. TEST_WORKERS pytest-xdist processes share the suite (most tests wait on
# servers); the Spark tests keep to one worker (one JVM), the browser tests to one, the
# simulator's to one (each runs its seeds on a pool of 2 processes of its own).
TEST_WORKERS ?= 3
FAST_WORKERS ?= 2

# everything, against the compiled core; the simulator's sabotage tests switch their
# workers to the .py sources (DISQUEPY_INTERPRETED=1), as compiled classes cannot be
# monkeypatched
test: $(STAMP) $(EXT) $(COMPAT)/.installed deps java typecheck
	$(BIN)/ruff check src tests bench scripts setup.py
	$(BIN)/lint-imports
	$(BIN)/python -c "import disquepy.core.node, disquepy, sys; \
	  sys.exit(not disquepy.compiled_modules() and 'the core is not compiled (setup.py)')"
	$(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup tests

# the fast tier alone: about a minute on two cores (a change to a codec or the core
# need not wait for Spark and Chromium)
test-fast: $(STAMP) $(EXT)
	$(BIN)/python -m pytest -p no:cacheprovider -n $(FAST_WORKERS) --dist loadgroup -m fast tests/unit tests/sim

# the same core interpreted (the .py files), on the suites that drive it in process
test-interpreted: $(STAMP) $(EXT)
	DISQUEPY_INTERPRETED=1 $(BIN)/python -m pytest -p no:cacheprovider -n $(FAST_WORKERS) \
	  -m fast tests/unit tests/sim

# The type gate (README, "Type checking"), part of `make test`: mypy --strict on the
# whole package (settings in pyproject.toml), new modules included. What it accepts,
# mypyc's own check (mypy's default, non-strict: setup.py) accepts too.
typecheck: $(STAMP)
	$(BIN)/mypy --strict src/disquepy

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts setup.py
	$(BIN)/lint-imports

bench: $(STAMP) $(EXT) deps $(PEERS)/.installed
	$(BIN)/python bench/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(COMPAT) $(PEERS) bench/loadgen build
	rm -f src/disquepy/codec/_creader.*.so src/disquepy/*.so src/disquepy/_mypyc_sources.txt
	find src/disquepy/core src/disquepy/codec -name '*.so' -delete

# Real-process fault suite (docs/RELIABILITY.md): 3 seeded runs x 60 s of faults on a
# 5-node cluster behind the bus proxy, jobs and 2 consumer groups; summary in
# var/chaos-summary.json.
CHAOS_SEED ?= 1
CHAOS_ARGS ?= --seed $(CHAOS_SEED) --runs 3 --duration 60 --groups 2
# Soak: many simulator seeds (2 worker processes) plus more chaos runs. Long: a 5-node
# seed takes ~2 s of CPU, so 20000 seeds are ~6 h on 2 cores (SOAK_SEEDS=2000: ~40 min).
SOAK_SEEDS ?= 20000
SOAK_JOBS ?= 2
SOAK_CHAOS_RUNS ?= 5

.PHONY: chaos soak

chaos: $(STAMP) $(EXT)
	@mkdir -p var
	$(BIN)/python -m disquepy.chaos $(CHAOS_ARGS) --json var/chaos-summary.json

soak: $(STAMP) $(EXT)
	@mkdir -p var; rc=0; \
	echo "== soak 1/2: simulator, $(SOAK_SEEDS) seeds, 5 nodes, every fault"; \
	$(BIN)/python -m disquepy.sim --seeds $(SOAK_SEEDS) --nodes 5 --faults all \
	  --jobs $(SOAK_JOBS) || rc=1; \
	echo "== soak 2/2: real processes, $(SOAK_CHAOS_RUNS) chaos runs x 60 s"; \
	$(BIN)/python -m disquepy.chaos --seed $(CHAOS_SEED) --runs $(SOAK_CHAOS_RUNS) \
	  --duration 60 --json var/soak-chaos.json || rc=1; \
	if [ $$rc = 0 ]; then echo "== soak: PASS"; else echo "== soak: FAIL (see above)"; fi; \
	exit $$rc

# Fuzzing (issue #18, docs/SECURITY.md): the decoders' Hypothesis targets (RESP readers,
# bus frames and messages into the core, AOF records into a node) with FUZZ_EXAMPLES
# examples each, then a live node under FUZZ_CASES random malformed requests and bus
# frames (plus the fixed cases, one byte a second for a whole request), then disque-web's
# routes (from its OpenAPI schema) under random hostile requests and raw malformed HTTP
# (tests/web/test_fuzz_web.py); prints the cases run per target. `make test` runs the same with a small budget.
FUZZ_EXAMPLES ?= 3000
FUZZ_CASES ?= 5000
FUZZ_SEED ?= 18

.PHONY: fuzz

fuzz: $(STAMP) $(EXT)
	@mkdir -p var
	DISQUEPY_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) DISQUEPY_FUZZ_REPORT=var/fuzz-decoders.json \
	  $(BIN)/python -m pytest -p no:cacheprovider -q tests/unit/test_fuzz.py
	DISQUEPY_FUZZ_CASES=$(FUZZ_CASES) DISQUEPY_FUZZ_SEED=$(FUZZ_SEED) \
	  DISQUEPY_FUZZ_SLOW_BYTES=13 DISQUEPY_FUZZ_REPORT=var/fuzz-live.json \
	  $(BIN)/python -m pytest -p no:cacheprovider -q tests/integration/test_fuzz_live.py
	DISQUEPY_FUZZ_CASES=$(FUZZ_CASES) DISQUEPY_FUZZ_SEED=$(FUZZ_SEED) \
	  DISQUEPY_FUZZ_REPORT=var/fuzz-web.json \
	  $(BIN)/python -m pytest -p no:cacheprovider -q tests/web/test_fuzz_web.py
	@$(BIN)/python scripts/fuzz_report.py var/fuzz-decoders.json var/fuzz-live.json \
	  var/fuzz-web.json
