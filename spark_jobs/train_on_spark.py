"""Train on the Spark cluster: TorchDistributor runs the trainer's entry point in barrier tasks.

    spark-submit --master spark://HOST:7077 [--py-files shardline.zip] spark_jobs/train_on_spark.py \
        --config FILE [--set key=value ...]

(what `shardline train --set train.launcher=spark` runs). The driver reads the config and ships it
to every process as a dict, not a path, since executors share no disk with the driver; each process
rebuilds it, points its storage layer at it and runs training.train.train: the dataset, checkpoints
and model are read and written through run_dir's URI, appended logs go to the process's local_dir.
TorchDistributor starts train.distributor.num_processes processes (default train.nproc) under
torchrun: on the driver with local_mode, else one per barrier task on the executors.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script (spark-submit): import the project from its root, not from spark_jobs/,
    # whose module names must not shadow the standard library's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pipeline.config import ShardlineConfig, build_config
from pipeline.errors import ShardlineError

APP_NAME = "shardline-train"
# How a training process reports a user error (below), so the driver can repeat it in one line.
ERROR_PREFIX = "shardline train: error: "


class DistributedTrainingFailed(ShardlineError):
    """A training process stopped on a user error (the same on every rank, e.g. divergence)."""


def train_process(tree: dict) -> str:
    """Runs in each TorchDistributor process (RANK, WORLD_SIZE, ... set by its torchrun)."""
    from pipeline import storage
    from training.train import train

    config = build_config(tree)
    storage.configure(config.storage.options())
    try:
        return train(config)
    except ShardlineError as error:
        print(ERROR_PREFIX + str(error), file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def run_distributed(config: ShardlineConfig) -> str:
    """Train with TorchDistributor on the active SparkSession; returns the model directory."""
    from pyspark.ml.torch.distributor import TorchDistributor

    settings = config.train.distributor
    distributor = TorchDistributor(num_processes=settings.num_processes or config.train.nproc,
                                   local_mode=settings.local_mode, use_gpu=settings.use_gpu)
    try:
        return distributor.run(train_process, config.to_dict())
    except Exception as error:  # TorchDistributor's RuntimeError (or Py4J's) holds the processes' output
        reported = re.findall(re.escape(ERROR_PREFIX) + r"(.+)", str(error))
        if reported:
            raise DistributedTrainingFailed(reported[-1].strip()) from None
        raise


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main

    def submit(config: ShardlineConfig, args) -> str:
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.appName(APP_NAME).getOrCreate()
        try:
            model_dir = run_distributed(config)
        finally:
            spark.stop()
        print(f"train: TorchDistributor finished; model in {model_dir}", flush=True)
        return model_dir

    return run_stage_main("train", submit, argv)


if __name__ == "__main__":
    sys.exit(main())
