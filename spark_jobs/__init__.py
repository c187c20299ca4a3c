"""Spark jobs (spark-submit entry points) and their pure DataFrame -> DataFrame transforms."""
