#!/usr/bin/env bash
# Set up (once) and run the whole test suite: lint, then pytest. Extra arguments go to pytest.
# --fast (first argument): lint, then only the unit and model tiers (tests/tiers.py) over the cores (pytest-xdist),
# and print the wall time.
set -euo pipefail
fast=0
if [ "${1:-}" = "--fast" ]; then
  fast=1
  shift
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MHA_VIZ_VENV:-$root/.venv}"
bash "$root/scripts/setup.sh" --dev
cd "$root"
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
if [ "$fast" = 1 ]; then
  set +e
  # one worker per core, at most 4 (each holds its own models); the whole suite below stays in one process
  "$venv/bin/python" -m pytest -m "unit or model" -n auto --maxprocesses=4 "$@"
  code=$?
  set -e
  echo "fast tiers: $SECONDS s (lint, then pytest -m \"unit or model\")"
  [ "$code" = 5 ] && echo "mha-viz: pytest collected no tests; that is a failure here" >&2 && exit 1
  exit "$code"
fi
# The browser tests (tests/e2e) drive the system Chromium; Playwright never downloads one here.
chromium="${MHA_VIZ_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$chromium" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "mha-viz: installing Chromium for the browser tests (apt-get)" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
if [ ! -x "$chromium" ]; then
  echo "mha-viz: the browser tests need Chromium at $chromium; install it (Debian: sudo apt-get install chromium) or set MHA_VIZ_CHROMIUM" >&2
  exit 1
fi
# The replica test (tests/e2e/test_replicas.py) puts the app behind a real HAProxy, from the system's packages.
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "mha-viz: installing HAProxy for the replica test (apt-get)" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends haproxy >/dev/null
fi
if ! command -v haproxy >/dev/null 2>&1 && [ ! -x /usr/sbin/haproxy ]; then
  echo "mha-viz: the replica test needs HAProxy; install it (Debian: sudo apt-get install haproxy)" >&2
  exit 1
fi
set +e
"$venv/bin/python" -m pytest "$@"
code=$?
set -e
if [ "$code" = 5 ]; then
  echo "mha-viz: pytest collected no tests; that is a failure here (the suite must run)" >&2
  exit 1
fi
exit "$code"
