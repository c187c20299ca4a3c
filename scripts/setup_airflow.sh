#!/usr/bin/env bash
# Creates .venv-airflow/ with Airflow 3 and the Spark provider 6.x, pinned by constraints-airflow.txt.
# A separate environment: Airflow's ~130 dependencies must not move the training stack's pins in
# .venv/. The DAG imports nothing of shardline; its tasks call .venv's `shardline` and spark-submit.
# Idempotent: a second run with unchanged pins does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/venv.sh
venv=.venv-airflow
venv_create "$venv"
if venv_stale "$venv" constraints-airflow.txt; then
  started=$(date +%s)
  "$venv/bin/python" -m pip install -q --upgrade pip
  # The Spark provider 5.x pulled pyspark 3.5; 6.x pulls pyspark-client 4, which installs into the same
  # pyspark/ package directory. Remove the old one first, or the two would be mixed file by file.
  if "$venv/bin/python" -m pip show -q pyspark >/dev/null 2>&1; then
    "$venv/bin/python" -m pip uninstall -q -y pyspark py4j
  fi
  "$venv/bin/python" -m pip install -q -c constraints-airflow.txt apache-airflow apache-airflow-providers-apache-spark
  venv_stamp "$venv"
  echo "setup_airflow.sh: installed Airflow into $venv in $(( $(date +%s) - started ))s"
fi
