# Two commands on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-fast install bench mutation clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: a CPU wheel from local disk; anything unpinned pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m reindex.terminal.demo

# Five pytest processes side by side (tests/run_suite.py): three waiting groups (the soak tests of
# tests/test_flows.py, the rest of it, tests/test_scale_out.py: real Prefect servers and workers, Dask clusters)
# beside the rest dealt into two CPU-bound groups of equal recorded seconds (tests/durations.json), so the
# waits overlap work and both cores stay busy. Each has its own base temp folder, server ports and Prefect home.
# pytest exits 5 when it ran no test: that must fail, not pass silently.
# Each group prints its 15 slowest tests. `make test` (and CI, .ci/run) runs the soak tests too (marked `soak`:
# minutes of waiting, e.g. a run paused past Prefect's lease renewal); `make test-fast` skips them.
# `REINDEX_RECORD_DURATIONS=1 make test` records each file's seconds again.
test: $(STAMP)
	@$(BIN)/python tests/run_suite.py

test-fast: $(STAMP)
	@REINDEX_SKIP_SOAK=1 $(BIN)/python tests/run_suite.py

bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/chunking_throughput.py

# Mutation testing (bench/mutation/README.md): every mutant of the four critical modules, then a seeded
# random sample of the rest; one worker (2-core box). Results stay in mutants/ (mutmut results / show NAME).
MUTATION_FULL := "reindex.books.manifests.*" "reindex.decisions.cutover.*" "reindex.planner._classify.*" "reindex.engine.execution.*"
MUTATION_RATE ?= 0.04
MUTATION_SEED ?= 12
mutation: $(STAMP)
	$(BIN)/pip install -q -e '.[mutation]'
	$(BIN)/mutmut run --max-children 1 $(MUTATION_FULL)
	$(BIN)/mutmut run --max-children 1 $$($(BIN)/python bench/mutation/tally.py sample --rate $(MUTATION_RATE) --seed $(MUTATION_SEED))
	$(BIN)/python bench/mutation/tally.py table

clean:
	rm -rf $(VENV) .pytest_cache build src/*.egg-info mutants
