#!/usr/bin/env bash
# The README's demo command doubles as a smoke test: it exits non-zero if
# anything it shows is not as described.
set -euo pipefail
exec bash "$(dirname "$0")/../examples/demo.sh"
