"""Ending a driver's SparkSession: `stop_session`, used by every `spark-submit` driver here
(spark_jobs.preprocess, spark_jobs.train_on_spark) as its last step."""
from __future__ import annotations

import os

from pyspark.sql import SparkSession


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
