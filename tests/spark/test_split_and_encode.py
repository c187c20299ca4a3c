import numpy as np
from pyspark.testing import assertDataFrameEqual

from pipeline import contract
from pipeline.config import SplitConfig
from pipeline.tokenizer import backend_json
from spark_jobs import encode, split


def test_split_is_a_function_of_id_and_seed_only(spark):
    ids = [(f"doc-{i}",) for i in range(2000)]
    small = spark.createDataFrame(ids[:500], [contract.ID_COLUMN]).transform(lambda d: split.with_split(d, SplitConfig(), 7))
    grown = spark.createDataFrame(ids, [contract.ID_COLUMN]).transform(lambda d: split.with_split(d, SplitConfig(), 7))
    # Growing the corpus leaves every existing document in its split.
    assertDataFrameEqual(small, grown.join(small.select(contract.ID_COLUMN), contract.ID_COLUMN))
    counts = {r[0]: r[1] for r in grown.groupBy(split.SPLIT).count().collect()}
    assert set(counts) == {"train", "val", "test"}
    assert 0.75 < counts["train"] / 2000 < 0.85
    reseeded = spark.createDataFrame(ids, [contract.ID_COLUMN]).transform(lambda d: split.with_split(d, SplitConfig(), 8))
    assert grown.exceptAll(reseeded).count() > 0


def test_label_ids_follow_the_map_and_unknown_labels_become_null(spark):
    df = spark.createDataFrame([("a", " email "), ("b", "asyncio"), ("c", "nope")], ["id", "label_raw"])
    out = split.with_label_ids(df, {"asyncio": 0, "email": 1}).select("id", contract.LABEL)
    assertDataFrameEqual(out, spark.createDataFrame([("a", 1), ("b", 0), ("c", None)], "id string, label int"))


def test_encode_padded_matches_the_tokenizer_row_for_row(spark, small_tokenizer):
    texts = ["Create a future object attached to the loop.", "x", "word " * 100]
    df = spark.createDataFrame([(f"d{i}", t, i) for i, t in enumerate(texts)], ["id", "text", "label"]).repartition(2)
    encoded = encode.encode_padded(df, backend_json(small_tokenizer), max_length=16, pad_id=small_tokenizer.pad_token_id)
    assert encoded.columns == ["id", "label", contract.INPUT_IDS, contract.ATTENTION_MASK, contract.NUM_TOKENS, *encode.STAT_COLUMNS]
    encoded = encoded.drop(*encode.STAT_COLUMNS)
    expected = small_tokenizer(texts, padding="max_length", truncation=True, max_length=16)
    rows = []
    for i in range(len(texts)):
        ids, mask = expected["input_ids"][i], expected["attention_mask"][i]
        rows.append((f"d{i}", i, ids, [int(m) for m in mask], int(np.sum(mask))))
    # The contract's types, spelled out: int32 ids, int8 mask, int32 count; the input's columns kept as they were.
    expected_schema = "id string, label bigint, input_ids array<int>, attention_mask array<tinyint>, num_tokens int"
    assertDataFrameEqual(encoded, spark.createDataFrame(rows, expected_schema))


def test_stride_cuts_long_documents_into_overlapping_windows(spark, small_tokenizer):
    texts = ["create the event loop " * 12, "x"]
    df = spark.createDataFrame([(f"d{i}", t, i) for i, t in enumerate(texts)], ["id", "text", "label"])
    encoded = encode.encode_padded(df, backend_json(small_tokenizer), max_length=16,
                                   pad_id=small_tokenizer.pad_token_id, stride=4)
    expected = small_tokenizer(texts, truncation=True, max_length=16, stride=4, padding="max_length",
                               return_overflowing_tokens=True)
    rows, seen = [], {}
    for ids, mask, doc in zip(expected["input_ids"], expected["attention_mask"], expected["overflow_to_sample_mapping"]):
        k = seen[doc] = seen.get(doc, -1) + 1
        rows.append((f"d{doc}" + (f"#{k}" if k else ""), doc, ids, mask, sum(mask), int(k == 0), 0))
    assert len(rows) > 3  # the long document really was cut
    expected_schema = ("id string, label bigint, input_ids array<int>, attention_mask array<tinyint>, num_tokens int, "
                       "_documents int, _truncated tinyint")
    assertDataFrameEqual(encoded.drop(encode.DOC_LENGTHS, encode.DROPPED), spark.createDataFrame(rows, expected_schema))
