#!/usr/bin/env bash
# Every benchmark, one after the other (about 30 minutes on 2 cores). Installs the benchmark-only
# tools (bertviz) into the project's venv first. Each script prints its figures, targets and ratios.
#   bash benchmarks/run_all.sh            all of them
#   bash benchmarks/run_all.sh --quick    skip the 10-user load test
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MHA_VIZ_VENV:-$root/.venv}"
bash "$root/scripts/setup.sh" --dev
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -c "$root/constraints.txt" -r "$root/requirements-bench.txt"
cd "$root"
export TOKENIZERS_PARALLELISM=false HF_HUB_DISABLE_TELEMETRY=1
py="$venv/bin/python"
echo "== engine: trace vs torch MultiheadAttention and SDPA ==";   "$py" benchmarks/bench_engine.py
echo; echo "== app, server side (and bertviz, same run) ==";         "$py" benchmarks/bench_app.py
echo; echo "== browser: cold start, 512-token heads view ==";        "$py" benchmarks/bench_browser.py
echo; echo "== browser: every control change, seed sentence ==";      "$py" benchmarks/bench_interact.py --reps 5
echo; echo "== the same, two busy processes beside it ==";           "$py" benchmarks/bench_interact.py --reps 5 --busy 2
echo; echo "== the command line answers before torch loads ==";         "$py" benchmarks/bench_cli_start.py
echo; echo "== torch threads, quiet and busy ==";                     "$py" benchmarks/bench_threads.py
echo; echo "== patching (exact, attribution) ==";                     "$py" benchmarks/bench_patching.py
echo; echo "== browser: long texts (MiniLM 512, SmolLM2 2048) ==";     "$py" benchmarks/bench_long.py --runs 3 --smol-runs 2 --all-views
echo; echo "== memory over 200 inputs ==";                           "$py" benchmarks/bench_memory.py
echo; echo "== head importance scan (MiniLM, SmolLM2) ==";            "$py" benchmarks/bench_importance.py --curve
echo; echo "== corpus statistics: batches, Ray workers, memory ==";     "$py" benchmarks/bench_corpus.py --quick
if [ "${1:-}" != "--quick" ]; then
  echo; echo "== 10 concurrent users ==";                            "$py" benchmarks/load_test.py --users 10 --seconds 150
  if command -v haproxy >/dev/null 2>&1; then
    echo; echo "== 10 users through HAProxy: 2 replicas vs 1 ==";      "$py" benchmarks/bench_replicas.py --users 10 --seconds 90
  fi
fi
