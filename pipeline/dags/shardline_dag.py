"""shardline as an Airflow 3 DAG: preprocess (spark-submit) -> train -> evaluate, one run_dir per run.

This file only wires tasks: it imports no torch, no pyspark and nothing of shardline, so the
scheduler parses it in milliseconds and the Airflow environment needs none of the training stack.

- first_wave, later_wave: ask `shardline sources` which Spark jobs the config needs, in two waves:
  the run's dataset (or, for a mixture in train.datasets, the source that trains the tokenizer),
  then the mixture's other sources.
- preprocess, preprocess_sources: `SparkSubmitOperator`s mapped over those waves (one task per job;
  the second wave's tasks run in parallel) on the connection `spark_default` (the master and deploy
  mode come from it, e.g. AIRFLOW_CONN_SPARK_DEFAULT='spark://local?deploy-mode=client'); each
  submits spark_jobs/preprocess.py with `--config CONFIG --set run_dir=RUN_ROOT/<run>` (and
  `--source NAME` for a mixture source) and ships `py_files` (the zip `shardline package` builds) to
  the executors. An empty wave is skipped, and what follows runs when nothing before it failed.
- train, evaluate: run `shardline train` / `shardline evaluate` as argument lists (no shell) with the
  same config and run_dir. `shardline` is a param: the command of an environment with the training
  stack (e.g. `/opt/shardline/.venv/bin/shardline`); see the README for a KubernetesPodOperator
  variant that runs it in the CUDA training image.
- train_launcher (a param; empty: the config's train.launcher) picks how `shardline train` starts
  its processes: `local`, `torchrun` (this task is node 0; the other nodes run the command it
  prints) or `spark` (TorchDistributor on the config's spark.master, e.g. the cluster preprocess used).

<run> is the run's logical date (YYYY-MM-DD, what `{{ ds }}` renders) when it has one, else its
run_id with every character outside [A-Za-z0-9._-] replaced by `-`: Airflow 3 triggers runs without
a logical date unless one is given (`airflow dags trigger` without `-l`, the REST API with
`logical_date: null`), and for those `{{ ds }}` is not defined.

Idempotent per run: every task writes only under RUN_ROOT/<run>; the Spark job skips a dataset
already built from the same config, and `shardline train`/`evaluate` skip work already done with the
same config and inputs (stage markers in run_dir/stages/), so a retry or a cleared task redoes only
what is missing, and a rerun of the same logical date redoes nothing.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Param, task

DAG_ID = "shardline"
# This file sits in pipeline/dags/ of a shardline checkout; the Spark job is two levels up.
CHECKOUT = Path(__file__).resolve().parents[2]
PREPROCESS_SCRIPT = CHECKOUT / "spark_jobs" / "preprocess.py"
# Scheduled runs use the defaults, so a deployment sets these in the scheduler's environment.
DEFAULT_CONFIG = os.environ.get("SHARDLINE_CONFIG", str(CHECKOUT / "configs" / "demo.yaml"))
DEFAULT_RUN_ROOT = os.environ.get("SHARDLINE_RUN_ROOT", str(CHECKOUT / "runs" / "airflow"))
RUN_DIR = "{{ params.run_root }}/{{ run_dir_name(dag_run) }}"
ABSOLUTE_PATH = "^/"  # tasks run in different working directories (and hosts): relative paths would drift

PARAMS = {
    "config": Param(
        DEFAULT_CONFIG, type="string", pattern=ABSOLUTE_PATH,
        description="absolute path of the shardline YAML recipe, readable by the Spark driver and the trainer",
    ),
    "run_root": Param(
        DEFAULT_RUN_ROOT, type="string", pattern=ABSOLUTE_PATH,
        description="absolute directory on storage every task shares; each run writes RUN_ROOT/<logical date or run id>/",
    ),
    "application": Param(
        str(PREPROCESS_SCRIPT), type="string", pattern=ABSOLUTE_PATH,
        description="the Spark job script (spark_jobs/preprocess.py) on the host that runs spark-submit",
    ),
    "py_files": Param(
        "", type="string", pattern=r"^$|^\S+\.zip$",
        description="zip of the project for the executors (`shardline package`); empty in local mode",
    ),
    "train_launcher": Param(
        "", type="string", enum=["", "local", "torchrun", "spark"],
        description="train.launcher for the train task (empty: the config's): local, torchrun or spark (TorchDistributor)",
    ),
    "shardline": Param(
        "shardline", type="string", minLength=1,
        description="command that runs the shardline CLI with the training stack, split like a shell would",
    ),
}


def run_dir_name(dag_run) -> str:
    """The run's directory name under run_root: its logical date, else its run_id made path-safe
    (`:` and `+` would be read as a URI scheme and a space by Hadoop's paths)."""
    if dag_run.logical_date is not None:
        return dag_run.logical_date.strftime("%Y-%m-%d")
    return re.sub(r"[^A-Za-z0-9._-]", "-", dag_run.run_id)


def shardline_stage_command(shardline: str, stage: str, config: str, run_dir: str, launcher: str = "") -> list[str]:
    command = [*shlex.split(shardline), stage, "--config", config, "--set", f"run_dir={run_dir}"]
    # Both shardline stages get it, so their markers record the same train section.
    return command + (["--set", f"train.launcher={launcher}"] if launcher else [])


with DAG(
    dag_id=DAG_ID,
    description="corpus -> Parquet (Spark) -> trained model -> eval.json, one run_dir per run",
    schedule="@daily",
    start_date=datetime(2026, 1, 1, tzinfo=timezone.utc),
    catchup=False,
    max_active_runs=1,  # each run takes the Spark cluster and the GPU; serial runs do not compete for them
    default_args={"retries": 2, "retry_delay": timedelta(minutes=2)},
    params=PARAMS,
    user_defined_macros={"run_dir_name": run_dir_name},
    doc_md=__doc__,
    tags=["shardline"],
) as dag:
    @task(execution_timeout=timedelta(minutes=10))
    def wave(which: str, params=None, dag_run=None) -> list[list[str]]:
        """The spark-submit arguments of one wave of preprocess jobs (see `shardline sources`)."""
        run_dir = f"{params['run_root']}/{run_dir_name(dag_run)}"
        base = ["--config", params["config"], "--set", f"run_dir={run_dir}"]
        command = [*shlex.split(params["shardline"]), "sources", *base]
        print("$ " + shlex.join(command), flush=True)
        waves = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
        return [base + (["--source", name] if name else []) for name in waves[which]]

    def preprocess_jobs(task_id: str, **options) -> SparkSubmitOperator:
        return SparkSubmitOperator.partial(
            task_id=task_id,
            conn_id="spark_default",
            application="{{ params.application }}",
            py_files="{{ params.py_files }}",  # empty renders to no --py-files at all
            name="shardline-preprocess-{{ run_dir_name(dag_run) }}",
            execution_timeout=timedelta(hours=6),
            **options,
        )

    @task(execution_timeout=timedelta(hours=24))
    def shardline_stage(stage: str, params=None, dag_run=None) -> str:
        """Run one `shardline` stage on this run's run_dir; returns the run_dir (a path, never data)."""
        run_dir = f"{params['run_root']}/{run_dir_name(dag_run)}"
        command = shardline_stage_command(params["shardline"], stage, params["config"], run_dir,
                                          params.get("train_launcher") or "")
        print("$ " + shlex.join(command), flush=True)
        subprocess.run(command, check=True)
        return run_dir

    preprocess = preprocess_jobs("preprocess").expand(application_args=wave.override(task_id="first_wave")("first"))
    # none_failed: an empty wave (no mixture, or no source training the tokenizer) is skipped, not failed.
    preprocess_sources = preprocess_jobs("preprocess_sources", trigger_rule="none_failed").expand(
        application_args=wave.override(task_id="later_wave")("rest"))
    train = shardline_stage.override(task_id="train", trigger_rule="none_failed")("train")
    evaluate = shardline_stage.override(task_id="evaluate", execution_timeout=timedelta(hours=2))("evaluate")
    preprocess >> preprocess_sources >> train >> evaluate
