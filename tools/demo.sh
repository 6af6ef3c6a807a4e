#!/usr/bin/env bash
# The main job: quantize real weights in all four formats and run them through dispatch.linear (CPU or GPU).
source "$(dirname "$0")/env.sh"
exec "$PY" -m tools.demo "$@"
