import json

from pyspark.testing import assertDataFrameEqual

from pipeline.config import DataConfig
from spark_jobs import read


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_jsonl_bad_records_are_kept_with_a_reason(spark, tmp_path):
    corpus = _write_lines(
        tmp_path / "corpus.jsonl",
        [
            json.dumps({"text": "a good document", "label": "email"}),
            '{"text": "truncated json',
            json.dumps({"text": "", "label": "email"}),
            json.dumps({"text": None, "label": "email"}),
            json.dumps({"text": "no label here"}),
            json.dumps({"text": "  padded label  ", "label": " logging "}),
        ],
    )
    cfg = DataConfig(input=str(corpus), label_column="label")
    df = read.read_corpus(spark, cfg, read.resolve_input_files(str(corpus)))
    good, rejected = read.split_rejects(df)
    assertDataFrameEqual(
        good.select(read.TEXT, read.LABEL_RAW),
        spark.createDataFrame([("a good document", "email"), ("  padded label  ", " logging ")], [read.TEXT, read.LABEL_RAW]),
    )
    assertDataFrameEqual(
        rejected.select(read.REJECT_REASON),
        spark.createDataFrame([("malformed_record",), ("empty_text",), ("null_text",), ("missing_label",)], [read.REJECT_REASON]),
    )
    assert {r[0] for r in rejected.select(read.SOURCE).collect()} == {corpus.resolve().as_uri()}


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


def test_format_is_detected_from_extensions_and_mixed_ones_are_refused(tmp_path):
    assert read.detect_format(["a.jsonl", "b.jsonl.gz"], "auto") == "jsonl"
    assert read.detect_format(["a.txt"], "auto") == "text"
    try:
        read.detect_format(["a.txt", "b.csv"], "auto")
    except read.InputError as error:
        assert "set data.format explicitly" in str(error)
    else:
        raise AssertionError("mixed extensions were accepted")
