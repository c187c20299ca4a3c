"""`shardline run` as a user runs it: markers, skipping, rerunning only what changed, dry run, failure.

One tiny run (a sixth of the demo corpus, with quality rules on, one epoch) is built once; the tests
then rerun it in the order a user would, so they run in file order on the same run_dir.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import demo_quality
from pipeline import driver, jvm_archive
from pipeline.config import load_config
from pipeline.demo import demo_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def shardline(*args: str) -> subprocess.CompletedProcess:
    # As after `source .venv/bin/activate`, without the PYSPARK_* the spark fixture may have set.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYSPARK_", "SHARDLINE_"))}
    env.update(PYTHONPATH=str(REPO_ROOT), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def mtimes(run_dir: Path) -> dict[str, int]:
    watched = [*(run_dir / "logs").glob("*.log"), *(run_dir / "stages").glob("*.json"),
               run_dir / "dataset" / "manifest.json", run_dir / "eval.json"]
    return {str(path.relative_to(run_dir)): path.stat().st_mtime_ns for path in watched if path.exists()}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("driver")
    corpus = write_jsonl(demo_quality.with_near_copy(demo_records()[::6]), root / "corpus.jsonl")
    run_dir = root / "run"
    args = ["--config", "configs/demo.yaml", "--set", f"run_dir={run_dir}", "--set", f"data.input={corpus}",
            "--set", "train.epochs=1", "--set", "tokenizer.train.vocab_size=500",
            *demo_quality.SET_ARGS]  # checked in test_first_run_...
    first = shardline("run", *args)
    assert first.returncode == 0, first.stdout + first.stderr
    return run_dir, args, first


def test_first_run_runs_every_stage_and_records_a_marker_for_each(tiny_run):
    run_dir, _, first = tiny_run
    logs = run_dir / "logs"
    assert f"preprocess: running (not done yet in {run_dir}); full log: {logs / 'preprocess.log'}" in first.stdout
    assert f"train: running (it reads the new output of preprocess); full log: {logs / 'train.log'}" in first.stdout
    assert f"evaluate: running (it reads the new output of train); full log: {logs / 'evaluate.log'}" in first.stdout
    # Not a terminal: progress comes as plain lines (Spark tasks now and then, each logged step with time left).
    assert re.search(r"^train: step \d+/\d+ epoch 0 loss [\d.]+, \d+ samples/s, (\d+:\d\d left|time left unknown)$",
                     first.stdout, re.M)
    assert re.search(r"^preprocess: done in \d+:\d\d$", first.stdout, re.M)
    assert "\r" not in first.stdout and " INFO " not in first.stdout + first.stderr
    for stage in driver.STAGES:
        marker = json.loads((run_dir / "stages" / f"{stage}.json").read_text())
        assert marker["stage"] == stage
        assert set(marker["sections"]) == set(driver.STAGE_SECTIONS[stage])
        assert (run_dir / "logs" / f"{stage}.log").read_text().startswith("$ ")
    assert json.loads((run_dir / "eval.json").read_text())["examples"] > 0
    demo_quality.check_removals(json.loads((run_dir / "dataset" / "manifest.json").read_text()))


def test_unchanged_rerun_skips_every_stage_without_starting_spark_or_training(tiny_run):
    run_dir, args, _ = tiny_run
    before = mtimes(run_dir)
    result = shardline("run", *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{stage}: skipped, already done with this config and inputs (add --force to redo it)" for stage in driver.STAGES
    ]
    assert mtimes(run_dir) == before  # no log rewritten: spark-submit and python -m training.* never ran


def test_changing_one_training_key_reruns_only_train_and_evaluate(tiny_run):
    run_dir, args, _ = tiny_run
    before = mtimes(run_dir)
    result = shardline("run", *args, "--set", "train.lr=0.002")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "preprocess: skipped, already done with this config and inputs (add --force to redo it)" in result.stdout
    assert "train: running (the train settings changed since its last run)" in result.stdout
    assert "evaluate: running (it reads the new output of train)" in result.stdout
    after = mtimes(run_dir)
    unchanged = ["logs/preprocess.log", "stages/preprocess.json", "dataset/manifest.json"]
    assert {k: after[k] for k in unchanged} == {k: before[k] for k in unchanged}
    assert all(after[k] > before[k] for k in ["logs/train.log", "logs/evaluate.log", "eval.json"])
    lineage = json.loads((run_dir / "model" / "lineage.json").read_text())
    assert lineage["config"]["train"]["lr"] == 0.002


def test_dry_run_prints_the_exact_argument_lists_and_runs_nothing(tiny_run):
    run_dir, args, _ = tiny_run
    before = mtimes(run_dir)
    result = shardline("run", *args, "--set", "train.lr=0.002", "--set", "train.nproc=2",
                       "--set", "spark.py_files=[/opt/shardline.zip]", "--force", "--dry-run")
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line) for line in result.stdout.splitlines() if line.startswith("  ")]
    config_path = str(run_dir / "config.resolved.yaml")
    conf = load_config(REPO_ROOT / "configs" / "demo.yaml").spark
    input_bytes = (run_dir.parent / "corpus.jsonl").stat().st_size  # a small corpus: the quick JIT
    assert jvm_archive.quick_jit(conf, input_bytes)
    assert commands == [
        [str(BIN / "spark-submit"), "--master", conf.master,
         *[arg for key, value in sorted(jvm_archive.driver_conf(conf, input_bytes).items()) for arg in ("--conf", f"{key}={value}")],
         "--py-files", "/opt/shardline.zip", str(REPO_ROOT / "spark_jobs" / "preprocess.py"),
         "--config", config_path, "--force"],
        [str(BIN / "torchrun"), "--standalone", "--nproc_per_node", "2", "-m", "training.train", "--config", config_path],
        [sys.executable, "-m", "training.evaluate", "--config", config_path],
    ]
    assert mtimes(run_dir) == before


def test_dry_run_prints_the_command_each_torchrun_node_runs_and_the_distributor_submit(tiny_run):
    run_dir, args, _ = tiny_run
    before = mtimes(run_dir)
    nodes = ["--set", "train.launcher=torchrun", "--set", "train.nproc=4", "--set", "train.torchrun.num_nodes=2",
             "--set", "train.torchrun.rdzv_endpoint=10.0.0.1:29400"]
    result = shardline("train", *args, *nodes, "--dry-run")
    assert result.returncode == 0, result.stderr
    config_path = str(run_dir / "config.resolved.yaml")
    lines = result.stdout.splitlines()
    assert shlex.split(lines[-2]) == [
        str(BIN / "torchrun"), "--nnodes", "2", "--nproc_per_node", "4", "--rdzv_backend", "c10d",
        "--rdzv_endpoint", "10.0.0.1:29400", "--rdzv_id", "shardline", "-m", "training.train", "--config", config_path]
    assert lines[-1] == ("train: run this same command on each of the 2 nodes (c10d rendezvous at 10.0.0.1:29400); "
                         "training starts when all have joined")
    static = shardline("train", *args, *nodes, "--set", "train.torchrun.node_rank=1", "--dry-run")
    assert static.returncode == 0, static.stderr
    assert shlex.split(static.stdout.splitlines()[-2])[1:11] == [
        "--nnodes", "2", "--nproc_per_node", "4", "--node_rank", "1", "--master_addr", "10.0.0.1", "--master_port", "29400"]
    spark = shardline("train", *args, "--set", "train.launcher=spark", "--set", "spark.master=spark://10.0.0.1:7077",
                      "--dry-run")
    assert spark.returncode == 0, spark.stderr
    assert shlex.split(spark.stdout.splitlines()[-2]) == [sys.executable, "-m", "spark_jobs.train_on_spark",
                                                          "--config", config_path]
    assert spark.stdout.splitlines()[-1] == (
        f"train: TorchDistributor on spark://10.0.0.1:7077: 1 process(es) in 1 barrier task(s); run_dir {run_dir} "
        "is a local path: every executor must see it at that path (a shared disk), else use an object-store URI "
        "(s3://..., gs://...)")
    missing = shardline("train", *args, "--set", "train.launcher=torchrun", "--set", "train.torchrun.num_nodes=2",
                        "--dry-run")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "shardline train: error: config key train.torchrun.rdzv_endpoint: required when num_nodes is 2: "
        "HOST:PORT of the first node, reachable from every node")
    assert mtimes(run_dir) == before


def test_a_changed_dataset_config_is_refused_alike_by_dry_run_and_run_before_spark_starts(tiny_run):
    run_dir, args, _ = tiny_run
    before = mtimes(run_dir)
    refusal = (f"shardline run: error: {run_dir / 'dataset'} was built with other preprocess settings; add --force to "
               "rebuild it (the old dataset is replaced), or set run_dir to a new directory to keep both")
    for extra in (["--dry-run"], []):
        result = shardline("run", *args, "--set", "train.lr=0.002", "--set", "preprocess.seed=99", *extra)
        assert result.returncode == 2
        assert result.stderr.strip() == refusal
        assert "running" not in result.stdout
    assert mtimes(run_dir) == before  # no JVM started: the preprocess log and the dataset are untouched
    forced = shardline("run", *args, "--set", "preprocess.seed=99", "--force", "--dry-run", "--to", "preprocess")
    assert forced.returncode == 0 and "preprocess: would run (--force was given):" in forced.stdout


def test_failed_training_keeps_the_dataset_and_the_next_run_resumes_there(tiny_run):
    import torch

    if torch.cuda.is_available():
        pytest.skip("train.device=cuda is how this test makes training fail; here it would succeed")
    run_dir, args, _ = tiny_run
    manifest = (run_dir / "dataset" / "manifest.json").read_text()
    failed = shardline("run", *args, "--set", "train.lr=0.003", "--set", "train.device=cuda")
    assert failed.returncode == 2  # a user error inside the stage: its one line, then where the log is
    assert failed.stderr.splitlines()[-2:] == [
        "shardline train: error: config key train.device: cuda, but no CUDA device is visible here; use auto or cpu",
        f"shardline run: train stopped on the error above; full log: {run_dir / 'logs' / 'train.log'}",
    ]
    assert "Traceback" not in failed.stderr
    assert "cuda" in (run_dir / "logs" / "train.log").read_text().lower()
    assert "evaluate: running" not in failed.stdout
    assert (run_dir / "dataset" / "manifest.json").read_text() == manifest
    assert not (run_dir / "stages" / "train.json").exists()  # the old model no longer counts as done

    resumed = shardline("run", *args, "--set", "train.lr=0.003")
    assert resumed.returncode == 0, resumed.stderr
    assert "preprocess: skipped" in resumed.stdout
    assert f"train: running (not done yet in {run_dir})" in resumed.stdout
