#!/usr/bin/env bash
# Creates .venv-current/: the training side on a current stack, as the GPU machine has it (numpy 2,
# a current pyarrow, torch 2.13 CPU, transformers, no pyspark, no petastorm), pinned by
# constraints-current.txt. The project is installed --no-deps: its declared ranges are the Spark
# stack's (.venv/), which this environment deliberately does not have. Idempotent: a second run with
# unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/venv.sh
venv=.venv-current
venv_create "$venv"
if ! "$venv/bin/python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "warning: $venv runs Python $("$venv/bin/python" -c 'import platform; print(platform.python_version())'); the current stack is tested on 3.11" >&2
fi
if venv_stale "$venv" constraints-current.txt pyproject.toml; then
  started=$(date +%s)
  "$venv/bin/python" -m pip install -q --upgrade pip
  # datatrove (core, no extras), with spaCy (its English word tokenizer: spacy.blank("en"), rule-based,
  # no model to download) and regex (its text utilities): tests/current_stack/test_filter_parity.py
  # runs datatrove's own quality filters against spark_jobs.text_filters.
  "$venv/bin/python" -m pip install -q -c constraints-current.txt numpy pyarrow torch transformers tokenizers \
    safetensors pydantic PyYAML tqdm matplotlib tensorboard pytest boto3 'moto[server]' datatrove spacy regex
  "$venv/bin/python" -m pip install -q --no-deps -e .
  # The point of this environment: nothing of the Spark stack may creep in through a dependency.
  "$venv/bin/python" - <<'PY'
import importlib.util
import sys

present = [name for name in ("pyspark", "petastorm") if importlib.util.find_spec(name) is not None]
if present:
    sys.exit(f"setup_current.sh: {', '.join(present)} got installed into .venv-current; it must stay Spark-free")
PY
  venv_stamp "$venv"
  echo "setup_current.sh: installed the current stack into $venv in $(( $(date +%s) - started ))s"
fi
