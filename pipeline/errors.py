"""The one base class of the errors a user can fix from the message alone.

The CLI prints a `ShardlineError` as one line (`shardline COMMAND: error: ...`) and exits 2, with no
traceback; every other exception is a bug or an environment failure and keeps its traceback. A
message says what is wrong, where (the config key, file or directory), and what to do about it.

Subclasses live beside the code that raises them (ConfigError in pipeline.config, InputError in
spark_jobs.read, ...). A few also derive from the built-in they replaced (ValueError,
FileNotFoundError), so code that caught the built-in keeps working.
"""
from __future__ import annotations


class ShardlineError(Exception):
    """A problem with the config, the inputs or a run directory, phrased for the user."""


class MissingPathError(ShardlineError, FileNotFoundError):
    """A file or directory the user named (or a stage needs) does not exist."""
