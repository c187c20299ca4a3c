"""Spark jobs (spark-submit entry points) and their pure DataFrame -> DataFrame transforms."""
import os as _os
import sys as _sys
import zipimport as _zipimport

# Spark puts its jars on the Python workers' sys.path (PYTHONPATH), and pyspark's worker calls
# importlib.invalidate_caches() before every task, which re-reads the directory of every zip on the
# path (Python 3.11 in the call, 3.13 at the next import): with spark-core's jar, 50-250 ms of every
# Python task (py-spy on a worker: most non-idle samples in zipimporter._read_directory). Jars hold
# no Python; drop them once per worker, when it first imports this package.
for _entry in [p for p in _sys.path if p.endswith(".jar")]:
    _sys.path.remove(_entry)
    _sys.path_importer_cache.pop(_entry, None)

# What is left is pyspark.zip and py4j's zip, re-read once per package imported from them (11
# importers: ~18 ms of every Python task, ~40 tasks a run on the benchmark's corpus). Re-read an
# archive only when the file changed (size or mtime), which is what invalidation is for.
_read_archive = _zipimport.zipimporter.invalidate_caches


def _invalidate_if_changed(importer) -> None:
    try:
        stat = _os.stat(importer.archive)
        stamp = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        stamp = None
    if stamp is None or getattr(importer, "_shardline_stamp", None) != stamp:
        _read_archive(importer)
        importer._shardline_stamp = stamp


if getattr(_read_archive, "__name__", "") != _invalidate_if_changed.__name__:  # once per process
    _zipimport.zipimporter.invalidate_caches = _invalidate_if_changed
