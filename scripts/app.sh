#!/usr/bin/env bash
# Set up (once) and start the dashboard on the bundled offline model. Extra arguments go to streamlit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MHA_VIZ_VENV:-$root/.venv}"
bash "$root/scripts/setup.sh"
cd "$root"
export HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" -m streamlit run app.py --browser.gatherUsageStats false "$@"
