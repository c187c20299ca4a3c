import json

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from pipeline.config import DataConfig
from spark_jobs import read


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_jsonl_bad_records_are_kept_with_a_reason(spark, tmp_path):
    lines = [
        json.dumps({"text": "a good document", "label": "email"}).encode(),
        b'{"text": "truncated json',
        json.dumps({"text": None, "label": "email"}).encode(),
        json.dumps({"text": 123, "label": "email"}).encode(),
        json.dumps({"text": "label is a list", "label": [1]}).encode(),
        b'{"text": "bad \xff byte", "label": "email"}',
        b"   ",  # whitespace-only lines separate records; they are not records
        b"[1, 2]",
        json.dumps({"text": "int label", "label": 7}).encode(),
    ]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b"\n".join(lines) + b"\n")
    offsets = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    cfg = DataConfig(input=str(corpus), label_column="label")
    df = read.read_corpus(spark, cfg, read.resolve_input_files(str(corpus)))
    expected = [
        ("a good document", "email", None, 0),
        (None, None, "malformed_record", 1),
        (None, "email", "null_text", 2),
        (None, None, "wrong_type", 3),
        (None, None, "wrong_type", 4),
        (None, None, "invalid_utf8", 5),
        (None, None, "malformed_record", 7),
        ("int label", "7", None, 8),
    ]
    assertDataFrameEqual(
        df.select(read.TEXT, read.LABEL_RAW, read.REJECT_REASON, read.OFFSET),
        spark.createDataFrame([(t, l, r, offsets[i]) for t, l, r, i in expected], "text string, label_raw string, reject_reason string, offset long"),
    )
    good, rejected = read.split_rejects(df)
    assert good.count() == 2
    assert {r[0] for r in rejected.select(read.SOURCE).collect()} == {corpus.resolve().as_uri()}
    # The raw record is kept, so a reject can be found and fixed.
    assert rejected.filter(F.col(read.REJECT_REASON) == "invalid_utf8").first()[read.RECORD] == '{"text": "bad \\xff byte", "label": "email"}'


def test_text_files_gzip_bz2_empty_and_doc_per_file(spark, tmp_path):
    import bz2
    import gzip

    (tmp_path / "a.txt").write_bytes(b"first line\n\nsecond \xc3\xa9 line\n")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"zipped one\nzipped two\n"))
    (tmp_path / "c.txt.bz2").write_bytes(bz2.compress(b"bzipped\n"))
    (tmp_path / "d.txt").write_bytes(b"")
    files = read.resolve_input_files(str(tmp_path))
    df = read.read_corpus(spark, DataConfig(input=str(tmp_path)), files)
    assertDataFrameEqual(
        df.select(read.TEXT, read.REJECT_REASON),
        spark.createDataFrame(
            [("first line", None), ("second é line", None), ("zipped one", None), ("zipped two", None),
             ("bzipped", None), (None, "empty_file")], "text string, reject_reason string"),
    )
    whole = read.read_corpus(spark, DataConfig(input=str(tmp_path), doc_per_file=True), files)
    assertDataFrameEqual(
        whole.select(read.TEXT, read.REJECT_REASON),
        spark.createDataFrame(
            [("first line\n\nsecond é line\n", None), ("zipped one\nzipped two\n", None), ("bzipped\n", None),
             (None, "empty_file")], "text string, reject_reason string"),
    )


def test_csv_and_parquet_read_the_configured_columns(spark, tmp_path):
    csv_path = tmp_path / "corpus.csv"
    csv_path.write_text('body,topic\n"first, with comma",a\n"second\nspans lines",b\n', encoding="utf-8")
    cfg = DataConfig(input=str(csv_path), text_column="body", label_column="topic")
    good, rejected = read.split_rejects(read.read_corpus(spark, cfg, read.resolve_input_files(str(csv_path))))
    expected = spark.createDataFrame([("first, with comma", "a"), ("second\nspans lines", "b")], [read.TEXT, read.LABEL_RAW])
    assertDataFrameEqual(good.select(read.TEXT, read.LABEL_RAW), expected)
    assert rejected.count() == 0

    parquet_dir = tmp_path / "pq"
    spark.createDataFrame([("first, with comma", "a"), ("second\nspans lines", "b")], ["body", "topic"]).write.parquet(str(parquet_dir))
    cfg = DataConfig(input=str(parquet_dir), text_column="body", label_column="topic")
    good, _ = read.split_rejects(read.read_corpus(spark, cfg, read.resolve_input_files(str(parquet_dir))))
    assertDataFrameEqual(good.select(read.TEXT, read.LABEL_RAW), expected)


def test_compressed_csv_reads_as_plain_csv_and_a_damaged_one_is_a_corrupt_file_reject(spark, tmp_path):
    # Found by the fuzz tier (200 examples): a .csv.gz was read undecompressed, so the driver's
    # header check called its gzip bytes a header without the configured columns.
    import bz2
    import gzip

    content = 'body,topic\n"first, with comma",a\n"second\nspans lines",b\n'.encode()
    (tmp_path / "a.csv.gz").write_bytes(gzip.compress(content))
    (tmp_path / "b.csv.bz2").write_bytes(bz2.compress(content))
    (tmp_path / "c.csv.gz").write_bytes(gzip.compress(b""))  # a valid stream holding no bytes
    (tmp_path / "d.csv.gz").write_bytes(b"not gzip at all")
    cfg = DataConfig(input=str(tmp_path), format="csv", text_column="body", label_column="topic")
    good, rejected = read.split_rejects(read.read_corpus(spark, cfg, read.resolve_input_files(str(tmp_path))))
    rows = [(r[read.TEXT], r[read.LABEL_RAW]) for r in good.collect()]
    assert sorted(rows) == sorted([("first, with comma", "a"), ("second\nspans lines", "b")] * 2)
    reasons = {r[read.SOURCE].rsplit("/", 1)[1]: r[read.REJECT_REASON] for r in rejected.collect()}
    assert reasons == {"c.csv.gz": "empty_file", "d.csv.gz": "corrupt_file"}

    (tmp_path / "e.csv.gz").write_bytes(gzip.compress(b"text,topic\nx,a\n"))
    with pytest.raises(read.InputError, match=r"e\.csv\.gz has no column\(s\) \['body'\]; its header is \['text', 'topic'\]"):
        read.read_corpus(spark, cfg, read.resolve_input_files(str(tmp_path)))


def test_a_blank_csv_line_separates_records_and_a_row_of_blank_fields_is_a_record(spark, tmp_path):
    # Found by the fuzz tier: `"\n\t",""` (every field blank, the header's width) was skipped as a
    # separator, so the written record was in no count; it is a record (the job rejects it as empty_text).
    (tmp_path / "a.csv").write_bytes(b'text,label\r\n"\n\t",""\r\n   \r\n\r\n"x","a"\r\n')
    cfg = DataConfig(input=str(tmp_path), format="csv", text_column="text", label_column="label")
    records = read.read_corpus(spark, cfg, read.resolve_input_files(str(tmp_path))).collect()
    assert [(r[read.TEXT], r[read.LABEL_RAW], r[read.REJECT_REASON]) for r in records] == [("\n\t", "", None), ("x", "a", None)]


def test_format_is_detected_from_extensions_and_mixed_ones_are_refused(tmp_path):
    assert read.detect_format(["a.jsonl", "b.jsonl.gz"], "auto") == "jsonl"
    assert read.detect_format(["a.txt"], "auto") == "text"
    try:
        read.detect_format(["a.txt", "b.csv"], "auto")
    except read.InputError as error:
        assert "set data.format explicitly" in str(error)
    else:
        raise AssertionError("mixed extensions were accepted")
