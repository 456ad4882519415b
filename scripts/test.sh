#!/usr/bin/env bash
# Set up (once) and run the whole test suite: lint, then pytest in two passes, and print each pass's wall time:
#   1. every tier but e2e (unit, model, app, slow) over the cores (pytest-xdist: a test file in one worker);
#   2. the e2e tier (real servers, Chromium, HAProxy, CLI processes, kernels) over three workers (MHA_VIZ_E2E_WORKERS;
#      1: in one process, one test at a time).
# Extra arguments go to both passes (a -m EXPR is combined with each pass's own); either pass may find no test,
# not both. --fast (first argument): lint, then only the unit and model tiers over the cores, and its wall time.
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
# Bytecode is written (next to the sources; .gitignore'd): the suite starts ~60 Python processes (pytest workers,
# servers, CLI runs, kernels) that would each compile mha_viz and pytest would re-rewrite every test module's asserts
# in each collection when PYTHONDONTWRITEBYTECODE is set.
unset PYTHONDONTWRITEBYTECODE
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
if [ "$fast" = 1 ]; then
  set +e
  # one worker per core, at most 4 (each holds its own models), each with torch and BLAS on its share of the cores
  # (as below); --dist worksteal: each worker starts on its own half of the tests in file order (a file's fixtures
  # built in one worker, not both as with --dist load) and an idle worker takes half of the other's remaining tests;
  # tests/e2e (all e2e by tests/tiers.py) is not even collected: its conftest imports Playwright in every worker
  cores="$(nproc 2>/dev/null || echo 1)"
  per_worker=$((cores / (cores < 4 ? cores : 4)))
  per_worker=$((per_worker > 0 ? per_worker : 1))
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-$per_worker}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-$per_worker}" \
    OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$per_worker}" \
    "$venv/bin/python" -m pytest -m "unit or model" -n auto --maxprocesses=4 --dist worksteal --ignore=tests/e2e "$@"
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
# A -m EXPR of the caller narrows each pass (pytest keeps only the last -m it is given).
marks="" args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -m) marks="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    -m?*) marks="${1#-m}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
only() { if [ -n "$marks" ]; then echo "($marks) and ($1)"; else echo "$1"; fi; }
# One worker per core, at most 4 (each holds its own models). --dist loadfile: a test file runs whole in one worker (its
# module fixtures built once); --no-loadscope-reorder: the files start in the order collected, which
# tests/heavy_first.py makes heaviest first by measured seconds (not by test count: a long file of few tests started
# last and ran alone at the end). (loadgroup does not group under pytest 9.2: pytest-xdist issue 1386.)
# Each worker's torch and BLAS get the cores per worker (1 here): two workers of two threads each on two cores wait
# for each other's time slices (one 512 x 512 eigvals on a busy machine: 107 s with two threads, 26 s with one).
cores="$(nproc 2>/dev/null || echo 1)"
per_worker=$((cores / (cores < 4 ? cores : 4)))
per_worker=$((per_worker > 0 ? per_worker : 1))
# Three e2e workers on two cores: with two, the cores were ~40 % idle (an e2e test mostly waits for its server,
# browser or CLI process); docs/test-times.md has the runs (every page-wait and served-within limit passed).
e2e_workers="${MHA_VIZ_E2E_WORKERS:-3}" e2e_how="in one process" e2e_par=()
if [ "$e2e_workers" -gt 1 ]; then
  e2e_how="over $e2e_workers workers"
  e2e_par=(-n "$e2e_workers" --dist loadfile --no-loadscope-reorder)
fi
set +e
start=$SECONDS
OMP_NUM_THREADS="${OMP_NUM_THREADS:-$per_worker}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-$per_worker}" \
  OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$per_worker}" \
  "$venv/bin/python" -m pytest -m "$(only "not e2e")" -n auto --maxprocesses=4 --dist loadfile --no-loadscope-reorder \
  ${args[@]+"${args[@]}"}
code=$?
parallel_s=$((SECONDS - start))
e2e_s="not run"
if [ "$code" = 0 ] || [ "$code" = 1 ] || [ "$code" = 5 ]; then  # 2 interrupted, 3 internal error, 4 usage: stop here
  # Three workers, a test file whole in one (--dist loadfile): an e2e test's time is mostly other processes (a server,
  # Chromium, a CLI run, a kernel) starting and working while the test process waits, so three files at once keep
  # both cores busy (docs/e2e-workers.md, docs/test-times.md). Each worker that runs a browser file starts its own app server and
  # Chromium (the session fixtures of tests/e2e/conftest.py); every server, proxy and kernel is on a free port.
  start=$SECONDS
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-$per_worker}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-$per_worker}" \
    OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$per_worker}" \
    "$venv/bin/python" -m pytest -m "$(only e2e)" ${e2e_par[@]+"${e2e_par[@]}"} ${args[@]+"${args[@]}"}
  e2e_code=$?
  e2e_s="$((SECONDS - start)) s"
  if [ "$code" = 5 ] || { [ "$code" = 0 ] && [ "$e2e_code" != 5 ]; }; then
    code=$e2e_code
  fi
fi
set -e
echo "test passes: unit, model, app and slow tiers over the cores ${parallel_s} s; e2e tier ${e2e_how} ${e2e_s}; in all $SECONDS s with lint"
if [ "$code" = 5 ]; then
  echo "mha-viz: pytest collected no tests; that is a failure here (the suite must run)" >&2
  exit 1
fi
exit "$code"
