# Two entry points (see README): `make run` serves the site, `make test` runs what CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1

.PHONY: setup run site test browser bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,compile,site,mcp,fleet]'
	$(PY) -m compileall -q kernelwiki
	touch $(STAMP)

setup: $(STAMP)

# The main job: validate the embedded wiki, then serve the site on http://127.0.0.1:8000
run: $(STAMP)
	$(PY) -m kernelwiki validate
	$(PY) -m kernelwiki site serve

site: $(STAMP)
	$(PY) -m kernelwiki site build

# Debian's chromium for the browser tests (Playwright cannot download a browser here).
browser:
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }

test: $(STAMP) browser
	$(PY) -m kernelwiki validate
	$(PY) -m kernelwiki refresh --check
	$(PY) -m kernelwiki audit
	$(PY) -m kernelwiki probe run --all --compile-only --no-record
	$(PY) -m pytest -q -n auto --dist loadfile

bench: $(STAMP)
	$(PY) scripts/bench_scale.py --pages 2000 --site --site-pages 2000

clean:
	rm -rf $(VENV) .kernelwiki-cache .pytest_cache site test-artifacts
