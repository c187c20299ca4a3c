"""Shared fixtures: one local[2] SparkSession for the whole run, small real corpora, a tokenizer."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_TIERS = ("unit", "spark", "e2e", "fuzz")


# Every random choice of a test (a kill moment, a generated corpus) comes from this one seed: set
# SHARDLINE_TEST_SEED to rerun a failure exactly; unset, each run draws a fresh one, said on failure.
# Put back into the environment so pytest-xdist's workers, started after this import, share it.
os.environ["SHARDLINE_TEST_SEED"] = os.environ.get("SHARDLINE_TEST_SEED") or str(int.from_bytes(os.urandom(4), "little"))
TEST_SEED = int(os.environ["SHARDLINE_TEST_SEED"])

# scripts/test.sh runs one pytest-xdist worker per core, so a trainer started by each that also
# took a torch (OpenMP) thread per core would oversubscribe them, and OpenMP threads spin while they
# wait. One thread per process, as torchrun gives each of its workers: measured with a busy process
# beside it, test_training_models.py took 85 s instead of 102 s. Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and getattr(item, "_uses_test_seed", False):
        report.sections.append(("test seed", f"rerun this exactly with SHARDLINE_TEST_SEED={TEST_SEED}"))


@pytest.fixture
def test_seed(request) -> int:
    """The run's seed (SHARDLINE_TEST_SEED), named in the report of a test that fails with it."""
    request.node._uses_test_seed = True
    return TEST_SEED


def _tier(item) -> str | None:
    return next((tier for tier in _TIERS if item.get_closest_marker(tier)), None)


def pytest_collection_modifyitems(items):
    # The tier is the directory a test lives in (tests/unit, tests/spark, tests/e2e, tests/fuzz),
    # unless the test names its own: a spark-submit run kept beside the in-session build it checks
    # is marked e2e, so `make test-quick` (-m "unit or spark") leaves it out.
    for item in items:
        directory = Path(str(item.fspath)).parent.name
        if _tier(item) is None and directory in _TIERS:
            item.add_marker(getattr(pytest.mark, directory))
    # Slowest tier first (a stable sort keeps each file's own order), for a run without xdist. Under
    # scripts/test.sh's `--dist loadfile` xdist orders the files itself, those with the most tests
    # first, so the short unit and Spark files run beside the long e2e ones (starting the slowest e2e
    # files at once instead was not faster: 770 s against 650 s, one run each on 2 cores and 3 workers,
    # where runs swing by a quarter).
    slowest_first = {"e2e": 0, "fuzz": 1, "spark": 2, "unit": 3}
    items.sort(key=lambda item: slowest_first.get(_tier(item), 4))


@pytest.fixture(scope="session")
def spark(s3_server):
    # After s3_server: the JVM and its Python workers inherit the AWS_* variables that point at it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import spark_jobs from this checkout, not from wherever it is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    from pipeline import jvm_archive
    from pipeline.config import SparkConfig

    builder = SparkSession.builder.master("local[2]").appName("shardline-tests")
    conf = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    # As `shardline preprocess` starts a driver for small input: the archive set-up built, the quick JIT.
    for key, value in jvm_archive.driver_conf(SparkConfig(master="local[2]", conf=conf), input_bytes=0).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server():
    """moto's standalone S3 server on 127.0.0.1; every client (pyarrow, boto3, Spark executors,
    subprocesses) finds it through the standard AWS_* environment variables alone."""
    import logging

    pytest.importorskip("moto.server", reason="moto[server] is not installed: a training-only GPU machine")
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    patch = pytest.MonkeyPatch()
    for name, value in {"AWS_ACCESS_KEY_ID": "shardline-test", "AWS_SECRET_ACCESS_KEY": "shardline-test-secret",
                        "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}.items():
        patch.setenv(name, value)
    patch.delenv("AWS_PROFILE", raising=False)
    patch.delenv("AWS_SESSION_TOKEN", raising=False)
    from pipeline import storage

    storage._filesystem.cache_clear()  # a filesystem made before the variables were set has no endpoint
    yield endpoint
    patch.undo()
    server.stop()


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh, empty bucket per test: s3://<name>."""
    import re
    import uuid

    import boto3

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:6]
    boto3.client("s3").create_bucket(Bucket=name)
    return f"s3://{name}"


@pytest.fixture(scope="session")
def docstring_records():
    """The demo corpus: real stdlib docstrings labelled by package."""
    from pipeline.demo import demo_records

    return demo_records()


@pytest.fixture(scope="session")
def small_tokenizer(docstring_records):
    from pipeline.config import TokenizerTrainConfig
    from pipeline.tokenizer import train_tokenizer

    return train_tokenizer((r["text"] for r in docstring_records[:400]), TokenizerTrainConfig(vocab_size=800))


@pytest.fixture(scope="session")
def submit_preprocess():
    """Runs spark_jobs/preprocess.py with spark-submit in its own JVM (e.g. on another master),
    with the environment a user has after `source .venv/bin/activate`: a plain spark-submit, or,
    with driver_options, one with the driver's Java options `shardline preprocess` adds (the class
    archive, the quick JIT for small input), for a test about the job rather than the launch."""
    def submit(config_path: Path, master: str, driver_options: bool = False) -> subprocess.CompletedProcess:
        import yaml

        from pipeline import launch
        from pipeline.config import build_config

        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
        env.update(PYTHONPATH=str(REPO_ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
        command = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
        if driver_options:
            # build_config, not load_config: that would also reconfigure this process's storage layer.
            config = build_config(yaml.safe_load(Path(config_path).read_text()), [f"spark.master={master}"])
            command = launch.spark_submit_args(config, input_bytes=0)
        result = subprocess.run(
            [*command, "--conf", "spark.ui.enabled=false", str(REPO_ROOT / "spark_jobs" / "preprocess.py"),
             "--config", str(config_path)],
            cwd=Path(config_path).parent, env=env, capture_output=True, text=True, timeout=600,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
        return result

    return submit


def dataset_contents(dataset_dir) -> dict:
    """What two builds of one config must agree on, leaving out what belongs to the build (its
    timings, its run_dir, the build id in its file names): the bytes of every shard file in manifest
    order and of every tokenizer file, the rejects' and removal samples' rows (sorted: their files
    follow partitions) and the manifest."""
    import pyarrow.parquet as pq

    from pipeline import contract, storage

    dataset_dir = str(dataset_dir)
    manifest = json.loads(storage.read_text(storage.join(dataset_dir, contract.MANIFEST_FILE)))
    manifest.pop("stage_seconds")
    manifest["config"].pop("run_dir")
    for stats in manifest["splits"].values():
        for entry in stats["files"]:
            entry.pop("path")
    rejects = []
    for entry in manifest.pop("rejects_files") + manifest.pop("removed_files", []):
        filesystem, path = storage.filesystem(storage.join(dataset_dir, entry["path"]))
        rejects += pq.read_table(path, filesystem=filesystem).to_pylist()
    parsed = contract.Manifest.model_validate_json(storage.read_text(storage.join(dataset_dir, contract.MANIFEST_FILE)))
    tokenizer_dir = storage.join(dataset_dir, "tokenizer")
    return {
        "manifest": manifest,
        "shards": {f"{split}/{number}": storage.read_bytes(uri) for split in contract.SPLITS
                   for number, uri in enumerate(parsed.split_files(dataset_dir, split))},
        "rejects": sorted(rejects, key=repr),
        "tokenizer": {storage.relative(e.uri, tokenizer_dir): storage.read_bytes(e.uri)
                      for e in storage.list_files(tokenizer_dir)},
    }


@pytest.fixture(scope="session")
def contents_of():
    return dataset_contents
