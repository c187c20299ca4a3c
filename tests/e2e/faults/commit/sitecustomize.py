"""Fault injection for the commit-protocol tests (test_commit_protocol.py), loaded by every Python
process started with this directory on PYTHONPATH (the Spark driver and its Python workers). Product code has no hook: this
wraps pipeline.storage.write_bytes from outside, inside Spark tasks only.

SHARDLINE_FAULT=fail-first-attempt: attempt 0 of the task of partition 0 raises right after
writing its first train file (so the file is left behind), once; SHARDLINE_FAULT=slow-writes: every data-file write
inside a task takes 1 s more, so a test can kill the job mid-write; SHARDLINE_FAULT=die-before-commit:
the driver SIGKILLs itself when it is about to write the manifest, after every shard is written. SHARDLINE_FAULT_LOG names a file
that gets a line each time a fault fires.
"""
import os

_MODE = os.environ.get("SHARDLINE_FAULT")

if _MODE:
    import time

    from pipeline import storage

    _write_bytes = storage.write_bytes

    def _note(line: str) -> None:
        with open(os.environ["SHARDLINE_FAULT_LOG"], "a") as log:
            log.write(line + "\n")

    def write_bytes(uri, data):
        from pyspark import TaskContext

        if _MODE == "die-before-commit" and uri.endswith("/dataset/manifest.json"):
            import signal

            _note(f"killed before writing {uri}")
            os.kill(os.getpid(), signal.SIGKILL)
        _write_bytes(uri, data)
        context = TaskContext.get()
        if context is None or not uri.endswith(".parquet") or "/rejects/" in uri:
            return
        if _MODE == "fail-first-attempt" and "/train/part-00000-" in uri and context.attemptNumber() == 0:
            _note(f"failed attempt after writing {uri}")
            raise RuntimeError(f"injected failure after writing {uri}")
        if _MODE == "slow-writes":
            _note(f"wrote {uri}")
            time.sleep(1)

    storage.write_bytes = write_bytes
