# The README's two commands. Both create .venv/ first (idempotent); `make test` also creates
# .venv-airflow/ (Airflow, kept apart from the pinned stack) for the DAG tests.
.PHONY: setup setup-airflow demo test config-docs

setup:
	./scripts/setup.sh

setup-airflow:
	./scripts/setup_airflow.sh

demo: setup
	.venv/bin/python -m pipeline.demo

test: setup setup-airflow
	.venv/bin/python -m pytest -q

# Regenerates docs/config.md from the config models (a test fails while it is stale).
config-docs: setup
	.venv/bin/python -m pipeline.config_reference --write
