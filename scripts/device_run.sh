#!/usr/bin/env bash
# Run probes on the lent GPU machine (H200; Python 3.12 with torch, no package registry).
# Usage there:  source .device/prelude.sh && bash scripts/device_run.sh COMMIT [runner arguments...]
# Expects .device/ (bash ../shared/device/bundle.sh) and .whl/ (jsonschema and its needs) carried
# with the working tree. Writes the new run records to $OUT/evidence.tgz and the log to $OUT/run.log.
set -uo pipefail
commit=$1; shift
deps=${TMPDIR:-/tmp}/kernelwiki-deps
python3 -m pip install -q --no-index --no-deps --no-compile --target "$deps" .whl/*.whl || exit 1
export PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}" KERNELWIKI_COMMIT=$commit
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
python3 -m kernelwiki probe run --no-refresh "$@" 2>&1 | tee "${OUT:-.}/run.log"
status=${PIPESTATUS[0]}
tar czf "${OUT:-.}/evidence.tgz" artifacts/evidence
exit "$status"
