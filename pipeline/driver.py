"""The driver: runs the stages in order, the Spark one through `spark-submit` like production does.

Commands are argument lists, never shell strings. Each stage's full output goes to
run_dir/logs/<stage>.log; the console gets the stage's own progress lines.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.config import ShardlineConfig, save_config

PREPROCESS_SCRIPT = Path(__file__).resolve().parent.parent / "spark_jobs" / "preprocess.py"


class StageFailed(RuntimeError):
    def __init__(self, stage: str, code: int, log_path: Path):
        super().__init__(f"stage {stage} failed with exit code {code}; full log: {log_path}")
        self.stage, self.code, self.log_path = stage, code, log_path


def spark_submit_executable() -> str:
    """pyspark's own launcher next to this interpreter, else the one on PATH (a cluster's)."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    found = shutil.which("spark-submit")
    if not found:
        raise FileNotFoundError("spark-submit not found beside this Python or on PATH; install pyspark 3.5")
    return found


def spark_submit_command(config: ShardlineConfig, config_path: Path, force: bool = False) -> list[str]:
    command = [spark_submit_executable(), "--master", config.spark.master]
    for key, value in sorted(config.spark.conf.items()):
        command += ["--conf", f"{key}={value}"]
    if config.spark.py_files:  # the `shardline package` zip, for executors without this checkout
        command += ["--py-files", ",".join(config.spark.py_files)]
    command += [str(PREPROCESS_SCRIPT), "--config", str(config_path)]
    if force:
        command.append("--force")
    return command


def stage_environment() -> dict[str, str]:
    env = dict(os.environ)
    # Spark's Python workers must use this interpreter, with its pandas/pyarrow/tokenizers.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_logged(stage: str, command: list[str], log_path: Path) -> None:
    """Run command; stdout goes to the console and the log, stderr (Spark's chatter) to the log only."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=log, text=True, env=stage_environment(), bufsize=1
        )
        assert process.stdout is not None
        for line in process.stdout:
            log.write(line)
            print(line, end="", flush=True)
        code = process.wait()
    if code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        print("\n".join(line for line in tail if "WARN" not in line), file=sys.stderr)
        raise StageFailed(stage, code, log_path)


def run_preprocess(config: ShardlineConfig, force: bool = False) -> None:
    config_path = Path(config.run_dir) / "config.resolved.yaml"
    save_config(config, config_path)
    command = spark_submit_command(config, config_path, force)
    run_logged("preprocess", command, Path(config.run_dir) / "logs" / "preprocess.log")
