# make report : create .venv if missing or stale, then run every scenario, both frameworks, vs the oracle
#               (in two processes: --jobs 2)
# make test   : the same venv, then the import-linter contracts (pyproject.toml) and the pytest suite
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

.PHONY: report test selfcheck site bench clean

report test selfcheck: export JAX_COMPILATION_CACHE_DIR = $(JAX_CACHE)
# Python's own bytecode cache (__pycache__/, git-ignored) even where PYTHONDONTWRITEBYTECODE is set (empty = unset):
# without it every worker and child process recompiles the package and pytest rewrites every test
# module again (about 3 s a process here); `make clean` removes the folders.
report test selfcheck: export PYTHONDONTWRITEBYTECODE =
report test selfcheck: export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS = 0

$(JAX_CACHE):
	@mkdir -p $@

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	@touch $(STAMP)

report: $(STAMP) | $(JAX_CACHE)
	$(VENV)/bin/detach-parity run --jobs 2

test: $(STAMP) | $(JAX_CACHE)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -n 2 --dist loadgroup --durations=10

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
