# Two entry points (see README): `make run` (the CLI on the embedded wiki) and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,compile]'
	$(PY) -m compileall -q kernelwiki
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(PY) -m kernelwiki validate
	$(PY) -m kernelwiki query --limit 0
	$(PY) -m kernelwiki get hw-wgmma --claims

test: $(STAMP)
	$(PY) -m kernelwiki validate
	$(PY) -m kernelwiki refresh --check
	$(PY) -m kernelwiki probe run --all --compile-only --no-record
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) scripts/bench_scale.py --pages 2000

clean:
	rm -rf $(VENV) .kernelwiki-cache .pytest_cache
