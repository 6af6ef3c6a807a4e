#!/usr/bin/env bash
# The test suite as CI runs it: lint for names that only fail at run time, the CPU tests (GPU tests are
# marked and skipped here), and the ahead-of-time ISA report for every kernel and target.
source "$(dirname "$0")/env.sh"
if ! command -v clang-19 >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && apt-get install -y -qq clang-19 lld-19 llvm-19) >/dev/null 2>&1 \
    || echo "note: clang-19 could not be installed; HIP compile rows will say so"
fi
"$VENV/bin/ruff" check --select E9,F .
export HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
export FP8DISPATCH_REQUIRE_INTERPRETER=1  # the Triton interpreter suites fail here instead of skipping (tests/conftest.py)
if [ -f tools/isa_report.py ]; then "$PY" -m tools.isa_report; fi
"$PY" -m tools.table_status  # informational: a stale entry is skipped by the dispatcher, not an error
exec "$PY" -m pytest -q "$@"
