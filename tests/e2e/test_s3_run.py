"""`shardline run` with data.input and run_dir on an S3-compatible server (moto on 127.0.0.1),
configured only through the AWS_* variables: every stage reads and writes the bucket, nothing lands
in a local `s3:` directory, and a second run skips every stage."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import contract, storage
from pipeline.demo import demo_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARDLINE = [sys.executable, "-m", "pipeline.cli"]
SMALL = ["--set", "tokenizer.train.vocab_size=600", "--set", "preprocess.max_length=32", "--set", "train.epochs=2",
         "--set", "train.batch_size=16", "--set", "train.log_every=5", "--set", "train.eval_every=20"]


def _run(args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(cwd),  # ~/.cache/shardline lands in tmp
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for inherited in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(inherited, None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def bucket_with_corpus(s3_server, tmp_path_factory):
    import boto3

    corpus = write_jsonl(demo_records()[::4], tmp_path_factory.mktemp("s3corpus") / "docstrings.jsonl")
    boto3.client("s3").create_bucket(Bucket="shardline-e2e")
    storage.write_bytes("s3://shardline-e2e/corpus/docstrings.jsonl", corpus.read_bytes())
    return "s3://shardline-e2e"


def _check_run(run_dir: str, cwd: Path, result) -> dict:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert not (cwd / "s3:").exists() and not (REPO_ROOT / "s3:").exists()
    manifest = contract.load_manifest(storage.join(run_dir, "dataset"))
    assert manifest.input_files[0]["path"] == "s3://shardline-e2e/corpus/docstrings.jsonl"
    for name in ("model/_SUCCESS", "model/lineage.json", "model/tokenizer.json", "config.resolved.yaml",
                 "stages/preprocess.json", "stages/train.json", "stages/evaluate.json", "metrics.jsonl",
                 "logs/preprocess.log", "logs/train.log"):
        assert storage.info(storage.join(run_dir, name)) is not None, name
    checkpoints = [e.uri for e in storage.list_files(storage.join(run_dir, "checkpoints"))]
    assert any(uri.endswith(".pt") for uri in checkpoints) and any(uri.endswith(".sha256") for uri in checkpoints)
    assert "AWS_SECRET_ACCESS_KEY" not in storage.read_text(storage.join(run_dir, "config.resolved.yaml"))
    assert "shardline-test-secret" not in storage.read_text(storage.join(run_dir, "logs", "preprocess.log"))
    return json.loads(storage.read_text(storage.join(run_dir, "eval.json")))


def test_classification_run_on_s3_then_an_unchanged_rerun_skips(bucket_with_corpus, tmp_path):
    run_dir = f"{bucket_with_corpus}/runs/mlp"
    args = [*SHARDLINE, "run", "--config", str(REPO_ROOT / "configs/demo.yaml"), "--set", f"run_dir={run_dir}",
            "--set", f"data.input={bucket_with_corpus}/corpus/*.jsonl", *SMALL, "--set", "train.epochs=4"]
    evaluation = _check_run(run_dir, tmp_path, _run(args, tmp_path))
    assert evaluation["task"] == "classification" and evaluation["accuracy"] > 0.4  # 4 classes: chance 0.25
    again = _run(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("skipped") == 3, again.stdout
    inspected = _run([*SHARDLINE, "inspect", run_dir, "--rows", "1"], tmp_path)  # the run_dir: finds dataset/
    assert inspected.returncode == 0, inspected.stderr
    assert f"{run_dir}/dataset" in inspected.stdout and "[train row 0]" in inspected.stdout
    predicted = _run([*SHARDLINE, "predict", "--model", f"{run_dir}/model", "--json",
                      "Create a new event loop and run the coroutine until it completes."], tmp_path)
    assert predicted.returncode == 0, predicted.stderr
    assert json.loads(predicted.stdout.splitlines()[0])["label"] in {"asyncio", "email", "logging", "tkinter"}
