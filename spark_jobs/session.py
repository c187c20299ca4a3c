"""A driver's SparkSession, started (`start_session`) and ended (`stop_session`) alike by both
drivers here, spark_jobs.preprocess and spark_jobs.train_on_spark, under spark-submit or as plain
Python."""
from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from pipeline import jvm_archive
from pipeline.config import ShardlineConfig


def start_session(config: ShardlineConfig, app_name: str, input_bytes: int | None = None) -> SparkSession:
    """The session on spark.master, with spark.conf and the driver JVM's options (jvm_archive,
    which sizes them by input_bytes where given); spark.py_files shipped when run as plain Python."""
    # Spark's Python workers must run this interpreter (the one with pandas/pyarrow/tokenizers),
    # not whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if not launched_by_spark_submit():  # spark-submit set these on the JVM it started
        builder = builder.master(config.spark.master)
        if config.spark.py_files:
            builder = builder.config("spark.submit.pyFiles", ",".join(config.spark.py_files))
    for key, value in jvm_archive.driver_conf(config.spark, input_bytes).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def launched_by_spark_submit() -> bool:
    """spark-submit already set --master on the JVM it started (and exported the gateway port to
    us); the builder would override it, so only set the master when run as plain Python."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def stop_session(spark: SparkSession) -> None:
    """spark.stop() without its wait for pyspark's accumulator server, for a driver about to exit.
    That server polls its one connection once a second, each task's update starts a new poll, and
    stop() waits for the poll to end: 0.9-1.0 s at the end of every run, measured. The JVM's
    SparkContext stops as before; the server's thread is a daemon and ends with the process."""
    context = spark.sparkContext
    server, context._accumulatorServer = context._accumulatorServer, None  # only SparkContext.stop() reads it
    spark.stop()
    if server is not None and isinstance(server.server_address, str):
        os.remove(server.server_address)  # spark.python.unix.domain.socket.enabled: the socket's file
