"""A real Spark standalone cluster on 127.0.0.1: one master and one worker, started with pyspark's
own spark-class, each in its own process group so stopping them stops the executors they started.
Used by the cluster tests (tests/e2e/test_cluster.py) and by benchmarks/bench_preprocess_memory.py
--cluster, where the executor is a JVM of its own."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def daemon_env(work: Path) -> dict:
    """Spark's launcher environment for the daemons: this environment without SPARK_HOME (pyspark's
    own Spark runs), bound to 127.0.0.1, logs and pid files under work, executors on this python."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_HOME"}
    env.update(SPARK_LOCAL_IP=LOOPBACK, SPARK_LOG_DIR=str(work / "logs"), SPARK_PID_DIR=str(work),
               PYSPARK_PYTHON=sys.executable)
    return env


def _wait_for_worker(ui_port: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{ui_port}/json/", timeout=2) as reply:
                if json.load(reply).get("aliveworkers", 0) >= 1:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"no worker registered with the master (web UI port {ui_port}) in {deadline_s}s")


@contextmanager
def standalone_cluster(work: Path, env: dict, cores: int = 2, memory: str = "2g") -> Iterator[tuple[str, int]]:
    """(spark://127.0.0.1:PORT, the master's web UI port) while the master and its one worker
    (`cores` cores, `memory` for executors) run; daemon logs and executor work dirs under work."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui_port = free_port(), free_port()
    daemons = []
    try:
        for args in (
            ["org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)],
            ["org.apache.spark.deploy.worker.Worker", f"spark://{LOOPBACK}:{port}", "--host", LOOPBACK,
             "--port", str(free_port()), "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
             "--work-dir", str(work / "work")],
        ):
            log = open(work / f"{args[0].rsplit('.', 1)[1]}.log", "w")
            daemons.append(subprocess.Popen([str(spark_class), *args], env=env, stdout=log, stderr=log,
                                            start_new_session=True))
        _wait_for_worker(ui_port, deadline_s=120)
        yield f"spark://{LOOPBACK}:{port}", ui_port
    finally:
        for daemon in reversed(daemons):
            os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in reversed(daemons):
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
