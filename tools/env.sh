# Sourced by tools/demo.sh and tools/test.sh: makes (once) a virtual environment with what the project needs.
# torch 2.13.0 CPU comes from the machine's local wheel; triton 3.6.0 needs numpy<2.4.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${FP8DISPATCH_VENV:-$ROOT/.venv}
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PY="$VENV/bin/python"
STAMP="$VENV/.fp8dispatch-$(cat "$ROOT/pyproject.toml" "$ROOT/tools/env.sh" | sha1sum | cut -c1-12)"
if [ ! -f "$STAMP" ]; then
  # The install unpacks about 2.2 GB; pip's wheel cache would add a second copy of what it downloads.
  export PIP_NO_CACHE_DIR=1
  free_mb=$(df -Pm "$(dirname "$VENV")" | awk 'NR==2 {print $4}')
  if [ "${free_mb:-0}" -lt 2600 ]; then  # a warning, not a stop: pip may still fit
    echo "warning: ${free_mb} MB free under $(dirname "$VENV"); the environment needs about 2600 MB." >&2
    echo "         On 'No space left on device', free some disk or set FP8DISPATCH_VENV to a larger disk." >&2
  fi
  "$PY" -m pip install -q --upgrade pip
  "$PY" -m pip install -q 'torch==2.13.0' 'numpy<2.4' 'triton==3.6.0'
  "$PY" -m pip install -q -e "$ROOT[test,dev,cuda]"
  touch "$STAMP"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
