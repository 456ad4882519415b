#!/usr/bin/env bash
# Set up (once) and run the whole test suite: lint, then pytest. Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MHA_VIZ_VENV:-$root/.venv}"
bash "$root/scripts/setup.sh" --dev
cd "$root"
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
"$venv/bin/ruff" check .
"$venv/bin/ruff" format --check .
set +e
"$venv/bin/python" -m pytest "$@"
code=$?
set -e
if [ "$code" = 5 ]; then
  echo "mha-viz: pytest collected no tests; that is a failure here (the suite must run)" >&2
  exit 1
fi
exit "$code"
