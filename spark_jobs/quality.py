"""Corpus quality in the Spark job: heuristic rules, language identification, near-duplicate removal.

Pure DataFrame -> DataFrame functions, and the read task's judge (RemovalMarker). A removed record
is not dropped here: it gets `removed_by`, the quality rule that removed it (records that are
rejects keep their reject_reason instead: what a rule said of them counts nowhere), and the job's
removal writer counts every one by rule and keeps a sample in removed/ (shard.write_removed). Order,
cheap first: the heuristic filters (text_filters), then the language of what they kept (or the
language first, with language.before_filters), then near-duplicates among what is still kept; all
before the tokenizer is trained, so its vocabulary sees only kept text.
"""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract
from pipeline.config import QualityConfig
from pipeline.errors import ShardlineError
from spark_jobs import clean, language, near_dedup, text_filters
from spark_jobs.read import LABEL_RAW, OFFSET, SOURCE, TEXT

REMOVED_BY = contract.REMOVED_BY  # the quality rule that removed the record; null while it is kept
DUPLICATE_OF = contract.DUPLICATE_OF  # near_dedup: the id of the document kept in this one's place
NEAR_DUPLICATE = "near_dedup.near_duplicate"
LANGUAGE, LANGUAGE_SCORE = contract.LANGUAGE, contract.LANGUAGE_SCORE
REMOVED_COLUMNS = [SOURCE, OFFSET, REMOVED_BY, TEXT, LABEL_RAW, LANGUAGE, LANGUAGE_SCORE, DUPLICATE_OF]  # removed/


class RemovalMarker:
    """removed_by (and, with quality.language, language and language_score) of a batch of records:
    the first heuristic rule a record fails, else its language's verdict (with
    language.before_filters, the language's verdict first); null on the reader's rejects. A
    read.RecordJudge: the task that read the records calls it on the texts it holds as Python
    strings, so the text crosses into the JVM once (a pass of its own sent every column to Python
    and back: 5-10 s of the GCIDE x4 job). The record checks after the read (length, label, id) come
    later, so a record they reject may have been judged: read.split_rejects takes the rejects first,
    so its verdict counts nowhere."""

    def __init__(self, quality: QualityConfig):
        self.filters = text_filters.TextFilters(quality)
        self.identifier = language.LanguageIdentifier(quality.language) if quality.language is not None else None
        self.language_first = self.identifier is not None and quality.language.before_filters
        self.fields = [T.StructField(REMOVED_BY, T.StringType())]
        if self.identifier is not None:
            self.fields += [T.StructField(LANGUAGE, T.StringType()), T.StructField(LANGUAGE_SCORE, T.FloatType())]

    def __call__(self, texts: list[str | None], reject_reasons: list[str | None]) -> list[pa.Array]:
        identifier = self.identifier
        reasons = [None] * len(texts)
        languages, scores = [None] * len(texts), [None] * len(texts)
        undecided = [row for row, (text, reject) in enumerate(zip(texts, reject_reasons))
                     if reject is None and text is not None]

        def judge(rows: list[int], verdicts: list) -> list[int]:
            """Records each row's verdict; the rows still kept."""
            for row, verdict in zip(rows, verdicts):
                reasons[row] = verdict
            return [row for row, verdict in zip(rows, verdicts) if verdict is None]

        def language_verdicts(rows: list[int]) -> list:
            for row in rows:
                languages[row], scores[row] = identifier.identify(texts[row])
            return [identifier.removal_reason(languages[row], scores[row]) for row in rows]

        if self.language_first:
            undecided = judge(undecided, language_verdicts(undecided))
        if self.filters.active:
            undecided = judge(undecided, self.filters([texts[row] for row in undecided]))
        if identifier is not None and not self.language_first:
            judge(undecided, language_verdicts(undecided))
        columns = [pa.array(reasons, pa.string())]
        if identifier is not None:
            columns += [pa.array(languages, pa.string()), pa.array(scores, pa.float32())]
        return columns


def removal_marker(quality: QualityConfig) -> RemovalMarker | None:
    """The read task's judge for quality's heuristic rules and language; None when neither is on."""
    return RemovalMarker(quality) if quality.filters_active or quality.language is not None else None


def mark_near_duplicates(good: DataFrame, quality: QualityConfig, num_partitions: int) -> DataFrame:
    """The records no rule removed (good: with content_hash and id, clean.with_ids), with removed_by
    = near_dedup.near_duplicate and duplicate_of = the kept document's id on every copy of a
    document that near_dedup.near_duplicates removes, null on the others. Hashed by content_hash
    into num_partitions to be joined, as preprocess.documents_by_content hashes the documents: once
    this frame is persisted and computed, that repartition finds it done, so the texts cross the
    network once, not twice. Records a rule removed are left out (on a null key they would all
    hash to one partition): split_removed takes them from good."""
    kept = good.filter(F.col(REMOVED_BY).isNull())
    documents = kept.select(clean.CONTENT_HASH, contract.ID_COLUMN, TEXT)
    removed = near_dedup.near_duplicates(documents, quality.near_dedup, num_partitions)
    removed = removed.select(clean.CONTENT_HASH, F.col(near_dedup.KEPT_ID).alias(DUPLICATE_OF))
    return (kept.repartition(num_partitions, clean.CONTENT_HASH)
            .join(removed.repartition(num_partitions, clean.CONTENT_HASH), clean.CONTENT_HASH, "left")
            .withColumn(REMOVED_BY, F.when(F.col(DUPLICATE_OF).isNotNull(), F.lit(NEAR_DUPLICATE))))


def split_removed(good: DataFrame, near_marked: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """(the kept documents without the quality columns that are not dataset columns, the removed
    records in removed/ layout). With near-dedup, near_marked (mark_near_duplicates of good) holds
    the records no rule removed: the kept documents are its unmarked ones, in its partitioning."""
    removed = _removed_layout(good.filter(F.col(REMOVED_BY).isNotNull()))
    if near_marked is None:
        return good.filter(F.col(REMOVED_BY).isNull()).drop(REMOVED_BY), removed
    near_duplicates = _removed_layout(near_marked.filter(F.col(REMOVED_BY).isNotNull()))
    kept = near_marked.filter(F.col(REMOVED_BY).isNull()).drop(REMOVED_BY, DUPLICATE_OF)
    return kept, near_duplicates.unionByName(removed)


def _removed_layout(removed: DataFrame) -> DataFrame:
    """removed with the columns of removed/, in its order; a quality column the job does not make is null."""
    for name, kind in ((LANGUAGE, "string"), (LANGUAGE_SCORE, "float"), (DUPLICATE_OF, "string")):
        if name not in removed.columns:
            removed = removed.withColumn(name, F.lit(None).cast(kind))
    return removed.select(*REMOVED_COLUMNS)


class RemovalCapError(ShardlineError):
    """A quality rule, or one filter's rules together, removed more of the corpus than
    quality.max_removed_fraction allows."""


def check_removal_caps(input_records: int, removed_by_rule: dict[str, int], max_fraction: float) -> None:
    """Stop the job, before anything is tokenized or published, when one rule removed more than
    max_fraction of the input records, or one filter did through its rules together (a wrong
    threshold must not silently empty a corpus, whether one rule or several of a filter's fail)."""
    if not input_records:
        return
    cap = f"over preprocess.quality.max_removed_fraction {max_fraction}"
    for rule, count in _largest_first(removed_by_rule):
        if count / input_records > max_fraction:
            raise RemovalCapError(f"quality rule {rule} removed {count} of {input_records} input records "
                                  f"({count / input_records:.1%}), {cap}; check its threshold, or raise the cap")
    by_filter: dict[str, dict[str, int]] = {}
    for rule, count in removed_by_rule.items():
        by_filter.setdefault(rule.split(".", 1)[0], {})[rule] = count
    for name, total in _largest_first({name: sum(rules.values()) for name, rules in by_filter.items()}):
        if total / input_records > max_fraction:
            each = ", ".join(f"{rule} {count}" for rule, count in _largest_first(by_filter[name]))
            raise RemovalCapError(f"quality filter {name} removed {total} of {input_records} input records "
                                  f"({total / input_records:.1%}: {each}), {cap}; check its thresholds, "
                                  "or raise the cap")


def _largest_first(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
