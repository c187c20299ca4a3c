"""Cleaning documents: Unicode normalization, whitespace, length filters, labels, exact de-duplication.

Pure DataFrame -> DataFrame functions over read.RECORD_SCHEMA-shaped frames. A record that fails a
check is not dropped: it gets a `reject_reason` (the first one that applies) and ends in rejects/.
Only `drop_duplicates` removes rows; it keeps, on each row it keeps, how many rows it stood for
(COPIES), so the tasks that write the shards also count what was removed, for the manifest.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import contract
from spark_jobs.read import ID_RAW, LABEL_RAW, TEXT, with_reason

CONTENT_HASH = "content_hash"  # sha256 of the cleaned text: what exact de-duplication compares
COPIES = "_copies"  # long: the rows of this content hash drop_duplicates found; it kept this one


class TextCleaner:
    """A Unicode normalization form (NFKC, NFC, NFKD, NFD; "none" skips it) and, with
    collapse_whitespace, every run of Unicode whitespace turned into one space and the ends trimmed.

    Plain Python per text, measured against Arrow's kernels on 126k dictionary entries (47.6 MB):
    `utf8_normalize` costs the same as `unicodedata.is_normalized` (most text is already NFKC,
    0.02 s), and `replace_substring_regex` (0.60 s) or split/filter/join in Arrow (0.63 s) are no
    faster than `" ".join(text.split())` with the conversions (0.54 s): ~4 us a document, 2-3 % of
    what the tokenizer costs. Python's definition of whitespace is kept that way, too.
    """

    def __init__(self, form: str, collapse_whitespace: bool):
        self.form, self.collapse_whitespace = form, collapse_whitespace

    @property
    def active(self) -> bool:
        return self.form != "none" or self.collapse_whitespace

    def clean(self, text: str) -> str:
        # is_normalized is a fast C check; most text is already in the form and is kept as is.
        if self.form != "none" and not unicodedata.is_normalized(self.form, text):
            text = unicodedata.normalize(self.form, text)
        return " ".join(text.split()) if self.collapse_whitespace else text

    def __call__(self, texts: list) -> list:
        return [None if t is None else self.clean(t) for t in texts]


def normalize_text(df: DataFrame, form: str, collapse_whitespace: bool) -> DataFrame:
    """TextCleaner(form, collapse_whitespace) over the text column. The preprocess job instead hands
    the cleaner to read.read_corpus, which applies it in the task that reads the text."""
    cleaner = TextCleaner(form, collapse_whitespace)
    if not cleaner.active:
        return df
    names = df.columns
    text_index = names.index(TEXT)

    def clean_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns = list(batch.columns)
            columns[text_index] = pa.array(cleaner(batch.column(text_index).to_pylist()), type=pa.string())
            yield pa.RecordBatch.from_arrays(columns, names=names)

    return df.mapInArrow(clean_batches, df.schema)


def filter_length(df: DataFrame, min_chars: int, max_chars: int | None) -> DataFrame:
    """Reject empty, too-short and too-long documents (lengths in characters, after cleaning)."""
    length = F.length(F.col(TEXT))
    df = with_reason(df, F.length(F.trim(F.col(TEXT))) == 0, "empty_text")
    df = with_reason(df, length < min_chars, "too_short")
    if max_chars is not None:
        df = with_reason(df, length > max_chars, "too_long")
    return df


def check_labels(df: DataFrame, allowed: list[str] | None) -> DataFrame:
    """Reject documents without a label, and (when the label set is configured) with an unknown one."""
    label = F.trim(F.col(LABEL_RAW))
    df = with_reason(df, F.col(LABEL_RAW).isNull() | (F.length(label) == 0), "missing_label")
    if allowed is not None:
        df = with_reason(df, ~label.isin(*allowed), "unknown_label")
    return df


def check_ids(df: DataFrame) -> DataFrame:
    """With data.id_column: reject documents whose id is missing."""
    return with_reason(df, F.col(ID_RAW).isNull() | (F.length(F.trim(F.col(ID_RAW))) == 0), "missing_id")


def with_ids(df: DataFrame, id_from_input: bool) -> DataFrame:
    """content_hash = sha256 of the cleaned text; id = the input's id, else a prefix of the hash
    (stable when the corpus grows or is reordered)."""
    df = df.withColumn(CONTENT_HASH, F.sha2(F.col(TEXT), 256))
    doc_id = F.trim(F.col(ID_RAW)) if id_from_input else F.col(CONTENT_HASH).substr(1, 32)
    return df.withColumn(contract.ID_COLUMN, doc_id)


def drop_duplicates(df: DataFrame) -> DataFrame:
    """Keep one document per content hash: the smallest row (id first), so the choice does not depend
    on input order or partitioning; COPIES says how many rows it stands for. One shuffle, by content
    hash, and no count of its own: the shard writers sum COPIES - 1 as the documents stream past
    (shard.write_partitions)."""
    others = [contract.ID_COLUMN] + [c for c in df.columns if c not in (CONTENT_HASH, contract.ID_COLUMN)]
    kept = df.groupBy(CONTENT_HASH).agg(F.min(F.struct(*others)).alias("_kept"), F.count(F.lit(1)).alias(COPIES))
    return kept.select(*[F.col(f"_kept.{c}") if c != CONTENT_HASH else F.col(c) for c in df.columns], COPIES)
