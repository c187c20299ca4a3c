"""The dataset's commit protocol on an S3-compatible store, under real faults: a task attempt that
fails after writing its file, and the whole job killed with SIGKILL in the middle of its writes.
Faults come from tests/e2e/faults/sitecustomize.py on the job's PYTHONPATH, not from product code."""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dataset_reads import split_rows
from pipeline import contract, launch, storage
from pipeline.config import build_config, save_config
from pipeline.demo import demo_records, write_jsonl
from spark_jobs.preprocess import build_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
FAULTS = Path(__file__).resolve().parent / "faults" / "commit"


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory, small_tokenizer, s3_server):
    import boto3

    root = tmp_path_factory.mktemp("commit")
    corpus = write_jsonl(demo_records()[::8], root / "corpus.jsonl")
    small_tokenizer.save_pretrained(str(root / "tokenizer"))
    boto3.client("s3").create_bucket(Bucket="shardline-commit")
    storage.write_bytes("s3://shardline-commit/corpus/docstrings.jsonl", corpus.read_bytes())
    return root, "s3://shardline-commit/corpus/docstrings.jsonl", str(root / "tokenizer")


def _config(run_dir: str, corpus: str, tokenizer: str):
    return build_config({
        "run_dir": run_dir,
        "data": {"input": corpus, "label_column": "label"},
        "tokenizer": {"path": tokenizer},
        # Several files per split, so a kill lands between writes.
        "preprocess": {"max_length": 32, "seed": 4, "num_partitions": 2,
                       "shard": {"row_group_rows": 8, "target_mb": 0.01}},
    })


# Seconds a spark-submit build of this module took up to its commit (a fault-free one, or one that
# died just before it): the random-kill test draws its moment from a run's length on this machine
# now, without a run of its own just to time one.
_RUN_SECONDS: list[float] = []


def _submit(config, tmp_path: Path, master: str = "local[2]", fault: str | None = None, wait: bool = True):
    config_path = tmp_path / f"{abs(hash(config.run_dir))}.yaml"
    save_config(config, str(config_path))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(FAULTS), str(REPO_ROOT)]) if fault else str(REPO_ROOT),
           "SHARDLINE_FAULT_LOG": str(tmp_path / "faults.log")}
    env.pop("SHARDLINE_FAULT", None)
    if fault:
        env["SHARDLINE_FAULT"] = fault
    for inherited in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(inherited, None)
    # spark-submit as `shardline preprocess` launches it (the class archive, the quick JIT for small
    # input): the protocol is the same, and a build of this corpus took 16 s instead of 27 (2 cores).
    config = config.model_copy(update={"spark": config.spark.model_copy(update={"master": master})})
    command = [*launch.spark_submit_args(config, input_bytes=0), "--conf", "spark.ui.enabled=false",
               str(REPO_ROOT / "spark_jobs" / "preprocess.py"), "--config", str(config_path), "--force"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    if not wait:
        return process
    started = time.monotonic()
    stdout, stderr = process.communicate(timeout=400)
    assert process.returncode == 0, stderr[-4000:]
    if fault is None and master == "local[2]":
        _RUN_SECONDS.append(time.monotonic() - started)
    return stdout


def _data_files(config) -> set[str]:
    return {storage.relative(e.uri, config.dataset_dir) for e in storage.list_files(config.dataset_dir)
            if e.uri.endswith(".parquet") and "/tokenizer/" not in e.uri}


def _listed(config) -> set[str]:
    manifest = contract.load_manifest(config.dataset_dir)
    return {f.path for s in manifest.splits.values() for f in s.files} | {f.path for f in manifest.rejects_files}


@pytest.fixture(scope="module")
def reference(corpus_and_tokenizer, spark):
    """The rows of a fault-free build of the same config (in-process, on the shared session)."""
    _, corpus, tokenizer = corpus_and_tokenizer
    config = _config("s3://shardline-commit/runs/reference", corpus, tokenizer)
    build_dataset(spark, config)
    return split_rows(config.dataset_dir)


def test_a_task_attempt_that_fails_after_its_write_leaves_no_duplicate_or_orphan(corpus_and_tokenizer, reference,
                                                                                  tmp_path):
    _, corpus, tokenizer = corpus_and_tokenizer
    config = _config("s3://shardline-commit/runs/retried", corpus, tokenizer)
    # local[2,2]: two attempts per task, as on a cluster (plain local mode never retries).
    stdout = _submit(config, tmp_path, master="local[2,2]", fault="fail-first-attempt")
    fired = (tmp_path / "faults.log").read_text().splitlines()
    assert len(fired) == 1 and "failed attempt" in fired[0]
    failed_file = storage.relative(fired[0].rsplit(" ", 1)[1], config.dataset_dir)
    # The failed attempt's files (its test split's, written before train, and the train file) are removed.
    removed = re.search(r"removed (\d+) file\(s\) of failed or speculative task attempts", stdout)
    assert removed and int(removed.group(1)) >= 1, stdout
    assert failed_file not in _data_files(config)
    assert _data_files(config) == _listed(config)
    assert split_rows(config.dataset_dir) == reference


def test_sigkill_mid_write_publishes_nothing_and_a_rerun_cleans_up(corpus_and_tokenizer, reference, spark, tmp_path):
    _, corpus, tokenizer = corpus_and_tokenizer
    config = _config("s3://shardline-commit/runs/killed", corpus, tokenizer)
    save_config(config, str(tmp_path / "killed.yaml"))
    process = _submit(config, tmp_path, fault="slow-writes", wait=False)
    log = tmp_path / "faults.log"
    deadline = time.monotonic() + 300
    while not (log.exists() and "/train/" in log.read_text()):
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the job never started writing shards"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the driver, its JVM and every Python worker
    process.communicate()
    written = _data_files(config)
    assert written, "the kill came before any shard was written"
    assert storage.info(storage.join(config.dataset_dir, contract.SUCCESS_FILE)) is None
    assert storage.info(storage.join(config.dataset_dir, contract.MANIFEST_FILE)) is None
    with pytest.raises(contract.DatasetNotReadyError, match="did not finish"):
        contract.load_manifest(config.dataset_dir)
    trainer = subprocess.run([sys.executable, "-m", "training.train", "--config", str(tmp_path / "killed.yaml")],
                             cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                             capture_output=True, text=True, timeout=300)
    assert trainer.returncode == 2, trainer.stderr[-3000:]
    assert f"{config.dataset_dir} has no _SUCCESS" in trainer.stderr and "Traceback" not in trainer.stderr

    build_dataset(spark, config)  # the rerun, in process: what spark-submit runs, without a JVM of its own
    assert split_rows(config.dataset_dir) == reference
    assert _data_files(config) == _listed(config)
    assert not written & _data_files(config)  # the killed run's files are gone, not reused


def test_killed_between_the_last_shard_and_the_commit_nothing_is_published(corpus_and_tokenizer, reference, spark,
                                                                          tmp_path):
    _, corpus, tokenizer = corpus_and_tokenizer
    config = _config("s3://shardline-commit/runs/uncommitted", corpus, tokenizer)
    started = time.monotonic()
    process = _submit(config, tmp_path, fault="die-before-commit", wait=False)
    process.communicate(timeout=400)
    _RUN_SECONDS.append(time.monotonic() - started)
    assert process.returncode != 0
    assert "killed before writing" in (tmp_path / "faults.log").read_text()
    written = _data_files(config)
    assert {name.split("/")[0] for name in written} >= {"train", "val", "test"}  # every shard was there
    assert storage.info(storage.join(config.dataset_dir, contract.MANIFEST_FILE)) is None
    assert storage.info(storage.join(config.dataset_dir, contract.SUCCESS_FILE)) is None
    with pytest.raises(contract.DatasetNotReadyError):
        contract.load_manifest(config.dataset_dir)
    build_dataset(spark, config)  # the rerun, in process
    assert split_rows(config.dataset_dir) == reference and not written & _data_files(config)


KILL_POINTS = int(os.environ.get("SHARDLINE_KILL_POINTS", "1"))  # more with SHARDLINE_KILL_POINTS=N


@pytest.mark.parametrize("point", range(KILL_POINTS))
def test_sigkill_at_a_random_moment_never_publishes_a_partial_dataset(corpus_and_tokenizer, reference, spark, tmp_path,
                                                                     point, test_seed):
    import random

    _, corpus, tokenizer = corpus_and_tokenizer
    config = _config(f"s3://shardline-commit/runs/random-{point}", corpus, tokenizer)
    if not _RUN_SECONDS:  # run alone: one whole run first, to time a run on this machine now
        _submit(config, tmp_path)
    duration = _RUN_SECONDS[-1]
    build_dataset(spark, config)  # a committed dataset (in process: quick) that the killed rebuild replaces
    delay = random.Random(test_seed + point).uniform(0, duration)  # the moment's share of the run is the seed's
    process = _submit(config, tmp_path, wait=False)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
    committed = storage.info(storage.join(config.dataset_dir, contract.SUCCESS_FILE)) is not None
    if committed:  # the kill came before the rebuild withdrew the old dataset, or after its own commit: whole
        assert _data_files(config) >= _listed(config) and split_rows(config.dataset_dir) == reference
    else:
        with pytest.raises(contract.DatasetNotReadyError):
            contract.load_manifest(config.dataset_dir)
    print(f"killed after {delay:.1f} s of a {duration:.1f} s run; committed: {committed}")
    build_dataset(spark, config)
    assert split_rows(config.dataset_dir) == reference and _data_files(config) == _listed(config)
