"""The Airflow DAG under real Airflow 3, in .venv-airflow (scripts/setup_airflow.sh; `make test` makes it).

Airflow's own CLI drives it as in production: `airflow db migrate`, `airflow dags reserialize`, then
`airflow dags test`, whose SparkSubmitOperator runs the real job through pyspark's spark-submit in
local mode (the master comes from an AIRFLOW_CONN_SPARK_DEFAULT connection), then real training and
evaluation through the stack's `shardline`.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import demo_quality
from pipeline.demo import demo_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_VENV = Path(os.environ.get("SHARDLINE_AIRFLOW_VENV", REPO_ROOT / ".venv-airflow"))
DAGS_FOLDER = REPO_ROOT / "pipeline" / "dags"
DS = "2026-01-01"

# Run inside .venv-airflow: what the DagBag holds, what importing the DAG file loaded, param checks.
INSPECT_DAG = """
import copy, json, sys
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.exceptions import ParamValidationError

bag = DagBag(dag_folder=sys.argv[1])
dag = bag.dags.get("shardline")
def rejected(**values):
    params = copy.deepcopy(dag.params)
    try:
        params.update(values)  # a ParamsDict validates each value as it is set
        params.validate()
    except ParamValidationError as error:
        return str(error).splitlines()[0]
    return None
print(json.dumps({
    "import_errors": {path: error.splitlines()[-1] for path, error in bag.import_errors.items()},
    "dag_ids": sorted(bag.dag_ids),
    "upstream": {task.task_id: sorted(task.upstream_task_ids) for task in dag.tasks},
    "operators": {task.task_id: type(task).__name__ for task in dag.tasks},
    "retries": {task.task_id: task.retries for task in dag.tasks},
    "preprocess": {task_id: {name: dag.get_task(task_id).partial_kwargs[name] for name in ("application", "py_files", "conn_id")}
                   for task_id in ("preprocess", "preprocess_sources")},
    "mapped_over": {task_id: [arg.operator.task_id for arg in dag.get_task(task_id).expand_input.value.values()]
                    for task_id in ("preprocess", "preprocess_sources")},
    "heavy_modules": sorted(name for name in ("torch", "pyspark", "pipeline.config", "training") if name in sys.modules),
    "defaults_valid": rejected() is None,
    "relative_config": rejected(config="configs/demo.yaml"),
    "not_a_zip": rejected(py_files="/opt/shardline.tar"),
    "unknown_launcher": rejected(train_launcher="mpirun"),
    "spark_launcher": rejected(train_launcher="spark"),
}))
"""


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    if not (AIRFLOW_VENV / "bin" / "airflow").exists():
        message = f"no Airflow environment at {AIRFLOW_VENV}: run scripts/setup_airflow.sh (make test does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    home = tmp_path_factory.mktemp("airflow-home")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYSPARK_", "AIRFLOW"))}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(DAGS_FOLDER),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_SPARK_DEFAULT="spark://local%5B2%5D?deploy-mode=client",  # master local[2]
        # The stack's bin first: pyspark's spark-submit, and the python3 it starts the job with.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=str(REPO_ROOT),  # the shardline tasks import this checkout
    )
    for command in (["db", "migrate"], ["dags", "reserialize"]):
        result = airflow(env, *command)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return env


def airflow(env, *args, timeout=300):
    return subprocess.run([str(AIRFLOW_VENV / "bin" / "airflow"), *args], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_dagbag_imports_the_dag_with_its_graph_retries_and_validated_params(airflow_env):
    result = subprocess.run([str(AIRFLOW_VENV / "bin" / "python"), "-c", INSPECT_DAG, str(DAGS_FOLDER)],
                            env=airflow_env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["import_errors"] == {}
    assert found["dag_ids"] == ["shardline"]
    assert found["upstream"] == {"first_wave": [], "preprocess": ["first_wave"], "later_wave": [],
                                 "preprocess_sources": ["later_wave", "preprocess"], "train": ["preprocess_sources"],
                                 "evaluate": ["train"]}
    python_task = "_PythonDecoratedOperator"
    assert found["operators"] == {"first_wave": python_task, "preprocess": "MappedOperator", "later_wave": python_task,
                                  "preprocess_sources": "MappedOperator", "train": python_task, "evaluate": python_task}
    assert set(found["retries"].values()) == {2}
    # One spark-submit per job of each wave (`shardline sources`), mapped at run time.
    assert found["preprocess"] == {task_id: {"application": "{{ params.application }}", "py_files": "{{ params.py_files }}",
                                             "conn_id": "spark_default"} for task_id in ("preprocess", "preprocess_sources")}
    assert found["mapped_over"] == {"preprocess": ["first_wave"], "preprocess_sources": ["later_wave"]}
    assert found["heavy_modules"] == []  # the DAG file wires tasks; it imports no torch, pyspark or shardline
    assert found["defaults_valid"]
    assert found["relative_config"].startswith("Invalid input for param config: 'configs/demo.yaml' does not match")
    assert found["not_a_zip"].startswith("Invalid input for param py_files")
    assert found["unknown_launcher"].startswith("Invalid input for param train_launcher") and found["spark_launcher"] is None


@pytest.fixture(scope="module")
def dated_run(airflow_env, tmp_path_factory):
    """`airflow dags test shardline DS`: one whole run, Spark to eval.json, for logical date DS."""
    tmp_path = tmp_path_factory.mktemp("dag-run")
    corpus = write_jsonl(demo_quality.with_near_copy(demo_records()[::8]), tmp_path / "corpus.jsonl")
    recipe = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    recipe["run_dir"] = str(tmp_path / "unused")  # the DAG sets run_dir per ds
    recipe["preprocess"].update(demo_quality.PREPROCESS)  # corpus quality through the DAG's spark-submit
    recipe["data"]["input"] = str(corpus)
    recipe["tokenizer"]["train"]["vocab_size"] = 500
    recipe["train"]["epochs"] = 1
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    conf = json.dumps({"config": str(config), "run_root": str(tmp_path / "runs"),
                       "shardline": f"{sys.executable} -m pipeline.cli"})
    first = airflow(airflow_env, "dags", "test", "shardline", DS, "-c", conf, timeout=600)
    return tmp_path, corpus, conf, first


def test_dags_test_runs_spark_preprocess_train_and_evaluate_then_a_rerun_redoes_nothing(airflow_env, dated_run):
    tmp_path, corpus, conf, first = dated_run
    output = first.stdout + first.stderr
    assert first.returncode == 0, output[-5000:]
    run_dir = tmp_path / "runs" / DS
    assert "spark-submit --master local[2]" in output and f"--set run_dir={run_dir}" in output
    manifest = json.loads((run_dir / "dataset" / "manifest.json").read_text())
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["split"] == "test" and evaluation["examples"] == manifest["splits"]["test"]["rows"]
    assert manifest["input_records"] == sum(1 for _ in open(corpus))
    demo_quality.check_removals(manifest)
    assert (run_dir / "model" / "lineage.json").exists()
    assert "state=success" in output

    # Idempotent per ds: the same ds again rebuilds nothing and retrains nothing.
    model_written = (run_dir / "model" / "lineage.json").stat().st_mtime_ns
    second = airflow(airflow_env, "dags", "test", "shardline", DS, "-c", conf, timeout=600)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output[-5000:]
    assert "is already built from this config; skipping" in output
    assert "train: skipped, already done with this config and inputs" in output
    assert "evaluate: skipped, already done with this config and inputs" in output
    assert (run_dir / "model" / "lineage.json").stat().st_mtime_ns == model_written


# Inside .venv-airflow: a manually triggered run with no logical date (what Airflow 3 creates for a
# trigger that gives none), run by dag.test(); prints the run's id and state.
TRIGGER_WITHOUT_LOGICAL_DATE = """
import json, sys
from datetime import datetime, timezone
from airflow import settings
from airflow.dag_processing.dagbag import DagBag

if settings.Session is None:
    settings.configure_orm()
dag = DagBag(dag_folder=sys.argv[1]).dags["shardline"]
run = dag.test(run_after=datetime(2026, 1, 2, tzinfo=timezone.utc), logical_date=None, run_conf=json.loads(sys.argv[2]))
print(json.dumps({"run_id": run.run_id, "logical_date": run.logical_date, "state": str(run.state)}))
"""


def test_a_manual_mixture_run_without_logical_date_builds_each_source_in_its_run_id_dir_and_trains_on_spark(
        airflow_env, tmp_path):
    """A manually triggered run (no logical date) of a mixture config, trained with the spark launcher:
    every task uses the run id's directory; one mapped Spark task builds the first source (it trains
    the tokenizer), then one task for each of the other two; TorchDistributor trains on the mix on the
    config's spark.master (local[2]); evaluate reports each source."""
    import re

    records = demo_records()[::8]
    recipe = yaml.safe_load((REPO_ROOT / "configs" / "demo.yaml").read_text())
    recipe["run_dir"] = str(tmp_path / "unused")
    del recipe["data"]["input"]
    recipe["tokenizer"]["train"]["vocab_size"] = 500
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    recipe["train"].update(epochs=1, datasets=[
        {"name": name, "input": str(write_jsonl(records[number::3], tmp_path / f"{name}.jsonl")), "weight": weight}
        for number, (name, weight) in enumerate(weights.items())])
    config = tmp_path / "mixture.yaml"
    config.write_text(yaml.safe_dump(recipe))
    conf = json.dumps({"config": str(config), "run_root": str(tmp_path / "runs"), "train_launcher": "spark",
                       "shardline": f"{sys.executable} -m pipeline.cli"})
    result = subprocess.run([str(AIRFLOW_VENV / "bin" / "python"), "-c", TRIGGER_WITHOUT_LOGICAL_DATE,
                             str(DAGS_FOLDER), conf], env=airflow_env, cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-5000:]
    run = json.loads(result.stdout.strip().splitlines()[-1])
    assert run["logical_date"] is None and run["state"].endswith("success"), run
    assert run["run_id"].startswith("manual__2026-01-02T00:00:00+00:00")  # Airflow adds a random suffix
    run_dir = tmp_path / "runs" / re.sub(r"[^A-Za-z0-9._-]", "-", run["run_id"])
    assert [path.name for path in (tmp_path / "runs").iterdir()] == [run_dir.name]
    assert re.search(rf"--set run_dir={re.escape(str(run_dir))}(\s|$)", output, re.M)  # spark-submit's arguments
    # Every task used that one directory: each source's dataset, the model and the evaluation.
    for name in weights:
        assert f"preprocess: wrote {run_dir / 'sources' / name / 'dataset'}" in output
        assert (run_dir / "sources" / name / "dataset" / "_SUCCESS").exists()
    assert output.count("--source web") >= 1 and "--source code" in output and "--source books" in output
    assert not (run_dir / "dataset").exists() and (run_dir / "model" / "lineage.json").exists()
    evaluation = json.loads((run_dir / "eval.json").read_text())
    assert evaluation["weights"] == weights and set(evaluation["sources"]) == set(weights)
    assert all(evaluation["sources"][name]["examples"] > 0 for name in weights)
    assert "--set train.launcher=spark" in output
    train_log = (run_dir / "logs" / "train.log").read_text()
    assert "-m spark_jobs.train_on_spark --config" in train_log.splitlines()[0]
    assert "train: TorchDistributor on local[2]: 1 process(es) in 1 barrier task(s)" in output
    assert "TorchDistributor finished; model in" in train_log
    assert json.loads((run_dir / "model" / "lineage.json").read_text())["config"]["train"]["launcher"] == "spark"
