"""Spark jobs (spark-submit entry points) and their pure DataFrame -> DataFrame transforms."""
import sys as _sys

# Spark puts its jars on the Python workers' sys.path (PYTHONPATH), and pyspark's worker calls
# importlib.invalidate_caches() before every task, which on Python 3.11 re-reads the directory of
# every zip on the path: with spark-core's jar, 50-250 ms of every Python task (py-spy on a worker:
# most non-idle samples in zipimporter._read_directory). Jars hold no Python; drop them once per
# worker, when it first imports this package.
for _entry in [p for p in _sys.path if p.endswith(".jar")]:
    _sys.path.remove(_entry)
    _sys.path_importer_cache.pop(_entry, None)
