# make report : create .venv if missing or stale, then run every scenario, both frameworks, vs the oracle
# make test   : the same venv, then the pytest suite
# make selfcheck : mutation self-check (every gradient-control site removed must fail a test)
VENV    := .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed

.PHONY: report test selfcheck clean

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[test]'
	@touch $(STAMP)

report: $(STAMP)
	$(VENV)/bin/detach-parity run

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup --durations=10

selfcheck: $(STAMP)
	$(VENV)/bin/detach-parity selfcheck

clean:
	rm -rf $(VENV) site reports
