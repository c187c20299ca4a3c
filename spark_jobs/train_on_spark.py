"""Train on the Spark cluster: TorchDistributor runs the trainer's entry point in barrier tasks.

    python -m spark_jobs.train_on_spark --config FILE [--set key=value ...]

(what `shardline train --set train.launcher=spark` runs) starts a SparkSession on spark.master with
spark.conf and spark.py_files; `spark-submit ... spark_jobs/train_on_spark.py --config FILE` works
too, on a cluster master. The driver reads the config and ships it
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
from typing import Callable

if __package__ in (None, ""):
    # Run as a script (spark-submit): import the project from its root, not from spark_jobs/,
    # whose module names must not shadow the standard library's.
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from pipeline.config import ShardlineConfig, build_config
from pipeline.errors import ShardlineError

APP_NAME = "shardline-train"
# How a training process reports a user error (below), so the driver can repeat it in one line.
ERROR_PREFIX = "shardline train: error: "
# TorchDistributor finds the rendezvous port by binding port 0 and letting it go; torchrun binds it
# later, and on a busy host another process can take it in between (seen in CI: EADDRINUSE). That
# fails the rendezvous before any training, so another attempt, with another port, is safe.
PORT_TAKEN = "EADDRINUSE"
RENDEZVOUS_ATTEMPTS = 3


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
        return retry_taken_ports(lambda: distributor.run(train_process, config.to_dict()))
    except Exception as error:  # TorchDistributor's RuntimeError (or Py4J's) holds the processes' output
        reported = re.findall(re.escape(ERROR_PREFIX) + r"(.+)", str(error))
        if reported:
            raise DistributedTrainingFailed(reported[-1].strip()) from None
        raise


def retry_taken_ports(run: Callable[[], str], attempts: int = RENDEZVOUS_ATTEMPTS) -> str:
    """run(), again when its rendezvous port was taken before torchrun could bind it."""
    for attempt in range(1, attempts):
        try:
            return run()
        except Exception as error:
            if PORT_TAKEN not in str(error) or ERROR_PREFIX in str(error):
                raise
            print(f"train: the rendezvous port was taken before torchrun bound it (attempt {attempt} of "
                  f"{attempts}); starting again on another", flush=True)
    return run()


def main(argv: list[str] | None = None) -> int:
    from pipeline.cli import run_stage_main
    from spark_jobs.session import start_session, stop_session

    def submit(config: ShardlineConfig, args) -> str:
        # Started from plain Python, not spark-submit, by the driver (pipeline.launch): with a local
        # master the barrier tasks run in the driver's JVM and leave a non-daemon timer thread
        # ("Barrier task timer for barrier() calls.", Spark 3.5) that keeps a spark-submit JVM alive
        # after the job; a JVM that pyspark starts exits when this process does.
        spark = start_session(config, APP_NAME)
        try:
            model_dir = run_distributed(config)
        finally:
            stop_session(spark)
        print(f"train: TorchDistributor finished; model in {model_dir}", flush=True)
        return model_dir

    return run_stage_main("train", submit, argv)


if __name__ == "__main__":
    sys.exit(main())
