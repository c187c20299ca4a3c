#!/usr/bin/env bash
# The README's test command (`make test`): the whole suite on every stack this machine can run
# (petastorm first, then current; scripts/stack.sh), each in its own environment, set up first.
# SHARDLINE_STACK=petastorm|current tests that one only. `--quick` (make test-quick) runs the unit
# and Spark tiers on the one stack stack_pick chooses.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/stack.sh

# pytest-xdist: one worker per core (SHARDLINE_TEST_WORKERS sets another count). Each worker runs
# whole files: --dist loadfile keeps a file's module fixtures (one Airflow home, one built dataset)
# in one process. Cores + 1 was tried on 2 cores: fresh-clone suites of 799/747 s and 873/897 s
# (petastorm/current) against 603/750 s and 760/803 s on 2 workers, within this machine's swing.
PYTEST=(-m pytest -q -n "${SHARDLINE_TEST_WORKERS:-auto}" --dist loadfile)

if [ "${1:-}" = "--quick" ]; then
  stack_pick
  ./scripts/setup.sh "$STACK"
  exec "$(stack_venv "$STACK")/bin/python" "${PYTEST[@]}" -m "unit or spark" tests/unit tests/spark
fi

stacks=()
if [ -n "${SHARDLINE_STACK:-}" ]; then
  stack_pick
  stacks=("$STACK")
else
  for stack in petastorm current; do
    if stack_python "$stack" >/dev/null; then stacks+=("$stack"); fi
  done
  stack_pick  # says which the demo uses, or fails when no Python runs either stack
fi
./scripts/setup_airflow.sh
# Every stack first: the petastorm suite's cross-stack test starts the current stack's environment.
for stack in "${stacks[@]}"; do
  ./scripts/setup.sh "$stack"
done
summary=()
for stack in "${stacks[@]}"; do
  venv=$(stack_venv "$stack")
  echo "test.sh: the $stack stack's suite, in $venv" >&2
  started=$(date +%s)
  # tests/current_stack (collected only when named) checks the current stack itself.
  extra=()
  if [ "$stack" = current ]; then extra=(tests tests/current_stack); fi
  "$venv/bin/python" "${PYTEST[@]}" "${extra[@]}"
  summary+=("$stack $(( $(date +%s) - started ))s")
done
echo "test.sh: passed on ${#stacks[@]} stack(s): ${summary[*]}" >&2
