# The README's two commands. Both create .venv/ first (idempotent).
.PHONY: setup demo test

setup:
	./scripts/setup.sh

demo: setup
	.venv/bin/python -m pipeline.demo

test: setup
	.venv/bin/python -m pytest -q
