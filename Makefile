# make report : create .venv if missing or stale, then run every scenario, both frameworks, vs the oracle
#               (in two processes: --jobs 2)
# make test   : the same venv, then the pytest suite (the import-linter contracts of pyproject.toml included)
# make test-isa : the numeric tests again, one instruction set below this CPU's best (XLA's and torch's kernels
#                 round differently by ISA: a test that passes on one CPU only is caught here; CI runs it too)
# make selfcheck : mutation self-check (every gradient-control site removed must fail a test)
# make site   : the static HTML reference in site/ (fresh run, figures, cheat sheet; bench plots if reports/bench.json exists)
# make bench  : step times (torch eager, torch.compile, JAX jit, cached_partial, jit over nnx.split) at fixture and large
#               sizes, the cost of freezing, tbptt memory; capped at 150 s (--budget); tables + reports/bench.json
VENV    := .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# JAX's persistent compilation cache for the suite and the report: project-local, one folder per
# set of pinned versions (a checksum of constraints.txt), so that a version change never reuses an
# entry; `make clean` removes it. Not for the bench: it measures compile times.
JAX_CACHE := $(CURDIR)/.jax_cache/$(shell cksum < constraints.txt | cut -d' ' -f1)

.PHONY: report test test-isa selfcheck site bench clean

report test selfcheck: export JAX_COMPILATION_CACHE_DIR = $(JAX_CACHE)
# XLA's quick compile for the report and the suite (tests/conftest.py adds the same to a bare pytest): at
# fixture sizes LLVM's optimisation passes cost more than they save; values change by rounding only and
# every tolerance stays. One set for both, so the suite reuses the report's compiled programs (XLA_FLAGS
# are part of the persistent cache's key). A flag of an explicit XLA_FLAGS wins. Not for the bench.
FAST_XLA := $(if $(findstring xla_backend_optimization_level,$(XLA_FLAGS)),,--xla_backend_optimization_level=0) \
            $(if $(findstring xla_llvm_disable_expensive_passes,$(XLA_FLAGS)),,--xla_llvm_disable_expensive_passes=true)
report test selfcheck: export XLA_FLAGS := $(strip $(XLA_FLAGS) $(FAST_XLA))
# Python's own bytecode cache (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE is set (empty = unset):
# without it every worker and child process recompiles the package and pytest rewrites every test
# module again (about 3 s a process here); `make clean` removes the folders.
report test test-isa selfcheck: export PYTHONDONTWRITEBYTECODE =
report test test-isa selfcheck: export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS = 0

# The second instruction set: one below this CPU's best, for XLA (--xla_cpu_max_isa) and torch
# (ATEN_CPU_CAPABILITY) alike. AVX-512 machines run AVX2; AVX2 machines run AVX, which has no FMA
# (SSE4_2 cannot: XLA then fails to convert to float16). Its compiled programs get a cache of their own.
ISA2  := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo AVX2 || echo AVX)
ATEN2 := $(if $(filter AVX2,$(ISA2)),avx2,default)
# every scenario's and pitfall's tests, parity (every case against the oracle) and the port checker's
SCENARIOS := $(basename $(notdir $(wildcard shared/scenarios/[a-z]*.py)))
ISA_TESTS := $(sort $(wildcard $(patsubst %,tests/test_%.py,$(SCENARIOS)) tests/test_pitfalls_*.py tests/test_port_*.py)) \
             tests/test_parity.py
test-isa: export JAX_COMPILATION_CACHE_DIR = $(JAX_CACHE)-$(ISA2)
test-isa: export XLA_FLAGS = --xla_cpu_max_isa=$(ISA2)
test-isa: export ATEN_CPU_CAPABILITY = $(ATEN2)

$(JAX_CACHE):
	@mkdir -p $@

# --no-compile: pip would byte-compile every module of torch, JAX and transformers (about 35 s here); the
# runs compile, once, only the ones they import (the bytecode cache is on for them: see above)
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-compile -c constraints.txt -e '.[test]'
	@touch $(STAMP)

report: $(STAMP) | $(JAX_CACHE)
	$(VENV)/bin/detach-parity run --jobs 2

test: $(STAMP) | $(JAX_CACHE)
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --durations=10

test-isa: $(STAMP)
	@echo "second pass: XLA_FLAGS=$$XLA_FLAGS ATEN_CPU_CAPABILITY=$$ATEN_CPU_CAPABILITY"
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder $(ISA_TESTS)

selfcheck: $(STAMP) | $(JAX_CACHE)
	$(VENV)/bin/detach-parity selfcheck

site: $(STAMP)
	$(VENV)/bin/detach-parity site --out site $(if $(wildcard reports/bench.json),--bench reports/bench.json)

bench: $(STAMP)
	@mkdir -p reports
	$(VENV)/bin/detach-parity bench --json reports/bench.json

clean:
	rm -rf $(VENV) site reports .jax_cache
	find shared torch_impl jax_impl tests -name __pycache__ -type d -prune -exec rm -rf {} +
