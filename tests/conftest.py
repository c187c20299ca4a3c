"""Shared fixtures: one local[2] SparkSession for the whole run, small real corpora, a tokenizer."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
_TIERS = ("unit", "spark", "e2e")


def pytest_collection_modifyitems(items):
    # The tier is the directory a test lives in: tests/unit, tests/spark, tests/e2e.
    for item in items:
        tier = Path(str(item.fspath)).parent.name
        if tier in _TIERS:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(scope="session")
def spark(s3_server):
    # After s3_server: the JVM and its Python workers inherit the AWS_* variables that point at it.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers import spark_jobs from this checkout, not from wherever it is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("shardline-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
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
    from pipeline.demo import stdlib_docstrings

    return stdlib_docstrings()


@pytest.fixture(scope="session")
def small_tokenizer(docstring_records):
    from pipeline.config import TokenizerTrainConfig
    from pipeline.tokenizer import train_tokenizer

    return train_tokenizer((r["text"] for r in docstring_records[:400]), TokenizerTrainConfig(vocab_size=800))
