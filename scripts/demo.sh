#!/usr/bin/env bash
# The README's demo command (`make demo`): sets up the stack stack_pick chooses (scripts/stack.sh),
# then runs the whole chain end to end on a small corpus (pipeline/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh
stack_pick
./scripts/setup.sh "$STACK"
exec "$(stack_venv "$STACK")/bin/python" -m pipeline.demo
