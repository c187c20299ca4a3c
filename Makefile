# The README's two commands, `make demo` and `make test`. Each picks a stack (scripts/stack.sh:
# petastorm when a Python 3.10-3.12 exists, else current; SHARDLINE_STACK chooses) and sets up its
# environment first (idempotent): .venv/ for petastorm, .venv-current/ for current. `make test` runs
# the whole suite on every stack this machine can run, with .venv-airflow/ (Airflow, kept apart from
# both stacks) for the DAG tests.
.PHONY: setup setup-airflow demo test test-quick config-docs

setup:
	./scripts/setup.sh

setup-airflow:
	./scripts/setup_airflow.sh

demo:
	./scripts/demo.sh

test:
	./scripts/test.sh

# The edit loop: the unit tier and the Spark tier on the shared session, no subprocess runs, on the
# picked stack.
test-quick:
	./scripts/test.sh --quick

# Regenerates docs/config.md from the config models (a test fails while it is stale).
config-docs:
	./scripts/setup.sh
	bash -c '. scripts/stack.sh && stack_pick 2>/dev/null && "$$(stack_venv "$$STACK")/bin/python" -m pipeline.config_reference --write'
