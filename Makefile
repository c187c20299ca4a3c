# The README's two commands. Both create .venv/ first (idempotent); `make test` also creates
# .venv-airflow/ (Airflow, kept apart from the pinned stack) for the DAG tests, and .venv-current/
# (numpy 2, current pyarrow, no Spark, no Petastorm: the GPU machine's stack) for the training side.
.PHONY: setup setup-airflow setup-current demo test test-quick config-docs

setup:
	./scripts/setup.sh

setup-airflow:
	./scripts/setup_airflow.sh

setup-current:
	./scripts/setup_current.sh

demo: setup
	.venv/bin/python -m pipeline.demo

# Then the unit and training tests again on the current stack (those needing pyspark skip there,
# through importorskip), with tests/current_stack, which checks that stack itself.
# pytest-xdist runs one test file per core at a time (--dist loadfile keeps a file's module fixtures,
# e.g. one Airflow home or one built dataset, in one process); the slow files are handed out first.
test: setup setup-airflow setup-current
	.venv/bin/python -m pytest -q -n auto --dist loadfile
	.venv-current/bin/python -m pytest -q -m unit tests/unit tests/current_stack

# The edit loop: the unit tier and the Spark tier on the shared session, no subprocess runs.
test-quick: setup
	.venv/bin/python -m pytest -q -n auto --dist loadfile -m "unit or spark" tests/unit tests/spark

# Regenerates docs/config.md from the config models (a test fails while it is stale).
config-docs: setup
	.venv/bin/python -m pipeline.config_reference --write
