#!/usr/bin/env bash
# The README's demo command doubles as a smoke test: it exits non-zero if
# anything it shows is not as described (e.g. unless its three concurrent
# renames show a 40001 and its retry and end at versions 1, 2, 3).
set -euo pipefail
exec bash "$(dirname "$0")/../examples/demo.sh"
