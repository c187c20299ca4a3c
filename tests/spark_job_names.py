"""The descriptions of the Spark jobs a session ran, as the Spark UI lists them: read from the
driver's status store once its listener bus has delivered every event (the store is filled
asynchronously)."""


def _jobs(spark):
    context = spark.sparkContext._jsc.sc()
    context.listenerBus().waitUntilEmpty()
    jobs = context.statusStore().jobsList(None)
    return [jobs.apply(i) for i in range(jobs.size())]


def last_job_id(spark) -> int:
    """The newest job's id, -1 before any."""
    return max((job.jobId() for job in _jobs(spark)), default=-1)


def descriptions_since(spark, after_job: int) -> list[str | None]:
    """The description of each job with an id above after_job, in the order they started; None for
    a job that has none."""
    jobs = sorted((job for job in _jobs(spark) if job.jobId() > after_job), key=lambda job: job.jobId())
    return [job.description().get() if job.description().isDefined() else None for job in jobs]


def near_dedup_phases(rounds: int | None) -> list[str]:
    """The names of near_dedup.near_duplicates's phases, in order, for a graph that took `rounds`
    star tests, or whose connected components were found in one task (rounds None)."""
    pairs = "near-dedup: MinHash signatures and candidate pairs"
    if rounds is None:
        return [pairs, "near-dedup: connected components in one task"]
    return [pairs, "near-dedup: candidates numbered in (id, content_hash) order",
            "near-dedup: connected components, edges between the numbered candidates",
            *(f"near-dedup: connected components, star test and round {k}" for k in range(1, rounds + 1))]
