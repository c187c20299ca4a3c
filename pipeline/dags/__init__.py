"""Airflow DAG files; point AIRFLOW__CORE__DAGS_FOLDER at this directory (see the README)."""
