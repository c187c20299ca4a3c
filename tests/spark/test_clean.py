"""The clean stage's transforms, each on an explicit DataFrame."""
import hashlib

from pyspark.testing import assertDataFrameEqual

from pipeline import contract
from spark_jobs import clean, read

SCHEMA = "text string, label_raw string, id_raw string, reject_reason string"


def test_normalize_text_applies_nfkc_and_collapses_unicode_whitespace(spark):
    df = spark.createDataFrame(
        [("\ufb01ne \uff21\u00a0b", None, None, None), ("  a\t\n b\u3000c  ", None, None, None), (None, None, None, "null_text")],
        SCHEMA,
    )
    assertDataFrameEqual(
        df.transform(lambda d: clean.normalize_text(d, "NFKC", True)),
        spark.createDataFrame([("fine A b", None, None, None), ("a b c", None, None, None), (None, None, None, "null_text")], SCHEMA),
    )
    assertDataFrameEqual(
        df.transform(lambda d: clean.normalize_text(d, "none", True)).select("text"),
        spark.createDataFrame([("\ufb01ne \uff21 b",), ("a b c",), (None,)], "text string"),
    )


def test_length_label_and_id_checks_give_the_first_reason(spark):
    df = spark.createDataFrame(
        [("", "a", "1", None), ("ab", "a", "2", None), ("x" * 11, "a", "3", None), ("fine", None, "4", None),
         ("fine", "zzz", "5", None), ("fine", "a", None, None), ("fine", " a ", "7", None), (None, None, None, "wrong_type")],
        SCHEMA,
    )
    out = (
        df.transform(lambda d: clean.filter_length(d, 3, 10))
        .transform(lambda d: clean.check_labels(d, ["a", "b"]))
        .transform(clean.check_ids)
    )
    assertDataFrameEqual(
        out.select("id_raw", read.REJECT_REASON),
        spark.createDataFrame(
            [("1", "empty_text"), ("2", "too_short"), ("3", "too_long"), ("4", "missing_label"), ("5", "unknown_label"),
             (None, "missing_id"), ("7", None), (None, "wrong_type")], "id_raw string, reject_reason string"),
    )


def test_ids_and_duplicates_are_independent_of_order(spark):
    rows = [("same text", "b", "z9"), ("same text", "a", "a1"), ("other", "a", "m5")]
    df = spark.createDataFrame(rows, "text string, label_raw string, id_raw string")
    derived = df.transform(lambda d: clean.with_ids(d, id_from_input=False))
    assert {r[contract.ID_COLUMN] for r in derived.collect()} == {
        hashlib.sha256(t.encode()).hexdigest()[:32] for t in ("same text", "other")}
    given = df.transform(lambda d: clean.with_ids(d, id_from_input=True))
    kept = given.transform(clean.drop_duplicates).select(contract.ID_COLUMN, "label_raw")
    # one row per content hash: the smallest id wins, whatever the input order
    assertDataFrameEqual(kept, spark.createDataFrame([("a1", "a"), ("m5", "a")], "id string, label_raw string"))
    reversed_kept = spark.createDataFrame(rows[::-1], df.schema).transform(
        lambda d: clean.with_ids(d, id_from_input=True)).transform(clean.drop_duplicates)
    assertDataFrameEqual(reversed_kept.select(contract.ID_COLUMN, "label_raw"), kept)
