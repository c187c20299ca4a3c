"""How the train stage's processes start (train.launcher), as argument lists, never shell strings.

- local: `python -m training.train`, or `torchrun --standalone` for train.nproc > 1 (this machine).
- torchrun: one `torchrun` per machine (train.torchrun.num_nodes of them, train.nproc processes
  each). The command is the one every node runs: the same everywhere with a c10d rendezvous, or
  differing only in --node_rank with a static one. The driver runs this node's; the others are
  started by the user or a scheduler.
- spark: `python -m spark_jobs.train_on_spark`, a Spark driver on spark.master whose
  TorchDistributor runs the same entry point (training.train.train) in barrier tasks on the
  executors, or on the driver (local_mode).

Imports nothing heavy: the driver and the CLI build these commands without torch or pyspark.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from pipeline import jvm_archive, storage
from pipeline.config import ShardlineConfig
from pipeline.errors import MissingPathError

TRAIN_MODULE = "training.train"
SPARK_TRAIN_MODULE = "spark_jobs.train_on_spark"
RESOLVED_CONFIG = "config.resolved.yaml"


def find_executable(name: str, hint: str) -> str:
    """`name` beside this interpreter (the venv's own), else the one on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if not found:
        raise MissingPathError(f"{name} not found beside {sys.executable} or on PATH; {hint}")
    return found


def spark_submit_executable() -> str:
    """pyspark's own launcher next to this interpreter, else the one on PATH (a cluster's)."""
    return find_executable("spark-submit", "install pyspark 3.5, or put a Spark 3.5 bin/ on PATH")


def spark_submit_args(config: ShardlineConfig, input_bytes: int | None = None) -> list[str]:
    """spark-submit and its options from spark.*, without the application; input_bytes, the size of
    what the job reads where known, picks the driver's JIT (jvm_archive.quick_jit)."""
    command = [spark_submit_executable(), "--master", config.spark.master]
    for key, value in sorted(jvm_archive.driver_conf(config.spark, input_bytes).items()):
        command += ["--conf", f"{key}={value}"]
    if config.spark.py_files:  # the `shardline package` zip, for executors without this checkout
        command += ["--py-files", ",".join(config.spark.py_files)]
    return command


def train_command(config: ShardlineConfig, config_path: str | Path) -> list[str]:
    """The train stage's command for train.launcher; config_path is the resolved config on this machine."""
    launcher = config.train.launcher
    if launcher == "torchrun":
        return torchrun_command(config, node_config_path(config, config_path))
    if launcher == "spark":
        # Not spark-submit: see spark_jobs/train_on_spark.main.
        return [sys.executable, "-m", SPARK_TRAIN_MODULE, "--config", str(config_path)]
    if config.train.nproc > 1:
        # --standalone: a local rendezvous on a free port, so two runs on one host cannot collide.
        return [_torchrun(), "--standalone", "--nproc_per_node", str(config.train.nproc),
                "-m", TRAIN_MODULE, "--config", str(config_path)]
    return [sys.executable, "-m", TRAIN_MODULE, "--config", str(config_path)]


def node_config_path(config: ShardlineConfig, config_path: str | Path) -> str:
    """The config every node reads: run_dir's copy when run_dir is on a store all nodes reach, else
    the local file (which then has to be at that path on each node)."""
    return str(config_path) if storage.is_local(config.run_dir) else config.run_path(RESOLVED_CONFIG)


def torchrun_command(config: ShardlineConfig, config_path: str) -> list[str]:
    train, nodes = config.train, config.train.torchrun
    command = [_torchrun(), "--nnodes", str(nodes.num_nodes), "--nproc_per_node", str(train.nproc)]
    if nodes.rdzv_endpoint is None:  # one node and no endpoint: nothing to meet but local processes
        command.append("--standalone")
    elif nodes.node_rank is not None:
        host, _, port = nodes.rdzv_endpoint.rpartition(":")
        command += ["--node_rank", str(nodes.node_rank), "--master_addr", host, "--master_port", port]
    else:
        command += ["--rdzv_backend", "c10d", "--rdzv_endpoint", nodes.rdzv_endpoint, "--rdzv_id", nodes.rdzv_id]
    return [*command, "-m", TRAIN_MODULE, "--config", config_path]


def launch_note(config: ShardlineConfig) -> str | None:
    """What the user has to do beside the driver's own command, in one line (None: nothing)."""
    train = config.train
    if train.launcher == "torchrun" and train.torchrun.num_nodes > 1:
        if train.torchrun.node_rank is None:
            return (f"train: run this same command on each of the {train.torchrun.num_nodes} nodes "
                    f"(c10d rendezvous at {train.torchrun.rdzv_endpoint}); training starts when all have joined")
        return (f"train: this is node {train.torchrun.node_rank} of {train.torchrun.num_nodes}; run the same "
                f"command on every other node with its own --node_rank (0 to {train.torchrun.num_nodes - 1})")
    if train.launcher == "spark":
        settings = train.distributor
        processes = settings.num_processes or train.nproc
        where = "on the driver" if settings.local_mode else f"in {processes} barrier task(s)"
        note = f"train: TorchDistributor on {config.spark.master}: {processes} process(es) {where}"
        if not settings.local_mode and storage.is_local(config.run_dir) and not config.spark.master.startswith("local"):
            note += (f"; run_dir {config.run_dir} is a local path: every executor must see it at that path "
                     "(a shared disk), else use an object-store URI (s3://..., gs://...)")
        return note
    return None


def _torchrun() -> str:
    return find_executable("torchrun", "install torch")
