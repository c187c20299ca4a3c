import hashlib
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from dataset_reads import split_table
from pipeline import contract, storage
from pipeline.config import build_config
from pipeline.demo import write_jsonl
from spark_jobs import read, split
from spark_jobs.preprocess import (ADVISORY_PARTITION_BYTES, SHUFFLE_PARTITIONS, AccountingError, DatasetConflictError,
                                   build_dataset, check_existing, sized_shuffles)

# What the contract promises a classification shard holds (README, "The dataset contract").
CLASSIFICATION_TYPES = {"id": "string", "input_ids": "list<int32>", "attention_mask": "list<int8>",
                        "label": "int32", "num_tokens": "int32"}


def column_types(schema: pa.Schema) -> dict[str, str]:
    return {f.name: f"list<{f.type.value_type}>" if pa.types.is_list(f.type) else str(f.type) for f in schema}


def split_files(dataset_dir, name):
    return contract.load_manifest(str(dataset_dir)).split_files(str(dataset_dir), name)


@pytest.fixture(scope="module")
def built(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("pre")
    records = docstring_records[::4]  # ~360 real documents, all four labels
    corpus = write_jsonl(records, root / "corpus.jsonl")
    with open(corpus, "a") as handle:
        handle.write('{"text": "broken\n')
        handle.write(json.dumps({"text": "   ", "label": "email"}) + "\n")
    config = build_config({
        "run_dir": str(root / "run"),
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 600}},
        "preprocess": {"max_length": 32, "seed": 3, "num_partitions": 2, "shard": {"row_group_rows": 64}},
    })
    return config, build_dataset(spark, config), records


def test_manifest_accounts_for_every_input_record(built):
    config, manifest, records = built
    assert manifest.input_records == len(records) + 2
    assert manifest.rejected_by_reason == {"malformed_record": 1, "empty_text": 1}
    assert sum(s.rows for s in manifest.splits.values()) == len(records)
    assert manifest.label_map == {"asyncio": 0, "email": 1, "logging": 2, "tkinter": 3}
    assert manifest.duplicates_removed == 0  # the docstrings are distinct
    assert manifest.pad_id == 0 and manifest.max_length == 32
    # The sha names the tokenizer shipped with the dataset, which is the run's copy byte for byte.
    shipped = storage.read_bytes(storage.join(config.dataset_dir, "tokenizer", "tokenizer.json"))
    assert storage.read_bytes(storage.join(config.tokenizer_dir, "tokenizer.json")) == shipped
    assert manifest.tokenizer_sha256 == hashlib.sha256(shipped).hexdigest()
    on_disk = contract.load_manifest(config.dataset_dir)
    assert on_disk == manifest


def test_shard_columns_have_the_contract_types_and_the_token_count_is_what_they_hold(built):
    config, manifest, _ = built
    real_tokens = 0
    for name in contract.SPLITS:
        for path in split_files(config.dataset_dir, name):
            assert column_types(pq.read_schema(path)) == CLASSIFICATION_TYPES, path
        masks = pa.concat_tables([pq.read_table(p, columns=[contract.ATTENTION_MASK])
                                  for p in split_files(config.dataset_dir, name)])
        real_tokens += int(np.sum(masks.column(0).combine_chunks().flatten().to_numpy()))
    assert real_tokens > 0 and manifest.token_count == real_tokens


def test_shards_hold_fixed_length_rows_that_decode_back(built):
    from pipeline.tokenizer import load_tokenizer

    config, manifest, records = built
    tokenizer = load_tokenizer(storage.join(config.dataset_dir, "tokenizer"))
    table = split_table(config.dataset_dir, "train")
    assert table.num_rows == manifest.splits["train"].rows
    assert sum(manifest.splits["train"].row_group_rows) == table.num_rows
    by_text = {r["text"]: r["label"] for r in records}
    labels = {i: name for name, i in manifest.label_map.items()}
    row = table.slice(0, 1).to_pylist()[0]
    assert len(row[contract.INPUT_IDS]) == 32 and len(row[contract.ATTENTION_MASK]) == 32
    decoded = tokenizer.decode(row[contract.INPUT_IDS], skip_special_tokens=True)
    matches = [t for t in by_text if tokenizer.decode(tokenizer(t, truncation=True, max_length=32)["input_ids"], skip_special_tokens=True) == decoded]
    assert matches and by_text[matches[0]] == labels[row[contract.LABEL]]


def test_rerun_skips_and_a_changed_config_is_refused(built):
    config, _, _ = built
    files = read.resolve_input_files(config.data.input)
    assert check_existing(config, files, force=False) is True
    changed = build_config({**config.to_dict(), "preprocess": {**config.to_dict()["preprocess"], "max_length": 64}})
    with pytest.raises(DatasetConflictError, match=r"sections \['preprocess'\] differ"):
        check_existing(changed, files, force=False)
    assert check_existing(changed, files, force=True) is False


def test_rerun_with_changed_input_is_refused(messy):
    config = messy[0]
    assert check_existing(config, read.resolve_input_files(config.data.input), force=False) is True
    with open(os.path.join(config.data.input, "a.jsonl"), "a") as handle:
        handle.write('{"text": "one more", "label": "email"}\n')
    with pytest.raises(DatasetConflictError, match="different input files"):
        check_existing(config, read.resolve_input_files(config.data.input), force=False)


def _messy_corpus(root, records):
    """A directory of jsonl files holding every bad-record class once (twice for some), with the
    exact expected reject counts and duplicates."""
    import bz2
    import gzip

    root.mkdir()
    good = [json.dumps(r).encode() for r in records]
    bad = [
        b'{"text": "cut off',  # malformed_record
        b"[1, 2, 3]",  # malformed_record: not an object
        json.dumps({"text": None, "label": "email"}).encode(),  # null_text
        json.dumps({"text": "", "label": "email"}).encode(),  # empty_text
        json.dumps({"text": " \u2003\t\u3000 ", "label": "email"}).encode(),  # empty_text once whitespace is collapsed
        json.dumps({"text": 42, "label": "email"}).encode(),  # wrong_type
        json.dumps({"text": "label of the wrong type", "label": {"x": 1}}).encode(),  # wrong_type
        b'{"text": "caf\xe9 latin-1 byte", "label": "email"}',  # invalid_utf8
        json.dumps({"text": "nobody labelled this"}).encode(),  # missing_label
        json.dumps({"text": "a label outside the set", "label": "zoology"}).encode(),  # unknown_label
        json.dumps({"text": "x" * 3000, "label": "email"}).encode(),  # too_long (max_chars 2000)
        json.dumps({"text": "ab", "label": "email"}).encode(),  # too_short (min_chars 3)
    ]
    dupes = [
        json.dumps(records[0]).encode(),  # exact duplicate
        json.dumps({**records[1], "text": "  " + records[1]["text"].replace(" ", "   ") + "\n"}).encode(),  # same after whitespace collapse
        json.dumps({**records[2], "text": "\uff21" + records[2]["text"]}).encode(),  # ...and its NFKC twin below
        json.dumps({**records[2], "text": "A" + records[2]["text"]}).encode(),
    ]
    half = len(good) // 2
    (root / "a.jsonl").write_bytes(b"\n".join(good[:half] + bad + dupes) + b"\n")
    corrupt = bytearray(gzip.compress(b'{"text": "lost", "label": "email"}\n' * 40))
    corrupt[20:40] = b"\xff" * 20
    (root / "b.jsonl.gz").write_bytes(gzip.compress(b"\n".join(good[half:half + 2]) + b"\n") + bytes(corrupt))
    (root / "c.jsonl.bz2").write_bytes(bz2.compress(b"\n".join(good[half + 2:]) + b"\n"))
    (root / "d.jsonl").write_bytes(b"")  # empty_file
    rejects = {"malformed_record": 2, "null_text": 1, "empty_text": 2, "wrong_type": 2, "invalid_utf8": 1,
               "missing_label": 1, "unknown_label": 1, "too_long": 1, "too_short": 1, "corrupt_file": 1,
               "empty_file": 1}
    # input records: good + bad + dupes + 1 corrupt-file record + 1 empty-file record;
    # documents: the good ones + the NFKC twins' one; duplicates: 3
    return len(good) + len(bad) + len(dupes) + 2, rejects, len(good) + 1, 3


@pytest.fixture(scope="module")
def messy(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("messy")
    records = [r for r in docstring_records[1::7] if 3 <= len(" ".join(r["text"].split())) <= 2000]
    records = list({" ".join(r["text"].split()): r for r in records}.values())  # distinct after cleaning
    num_inputs, rejects, num_documents, duplicates = _messy_corpus(root / "corpus", records)
    config = build_config({
        "run_dir": str(root / "run"),
        "data": {"input": str(root / "corpus"), "label_column": "label",
                 "labels": ["asyncio", "email", "logging", "tkinter"]},
        "tokenizer": {"train": {"vocab_size": 600}},
        "preprocess": {"max_length": 32, "seed": 3, "num_partitions": 2, "min_chars": 3, "max_chars": 2000,
                       "shard": {"row_group_rows": 16}},
    })
    return config, build_dataset(spark, config), num_documents, num_inputs, rejects, duplicates


def test_every_bad_record_class_is_counted_and_the_identity_holds(messy):
    config, manifest, num_documents, num_inputs, rejects, duplicates = messy
    assert manifest.rejected_by_reason == rejects
    assert manifest.duplicates_removed == duplicates
    assert manifest.input_records == num_inputs
    documents = sum(s.documents for s in manifest.splits.values())
    assert documents == num_documents
    assert manifest.input_records == documents + sum(manifest.rejected_by_reason.values()) + manifest.duplicates_removed
    assert sum(s.rows for s in manifest.splits.values()) == num_documents  # classification: a row per document
    rejected = pq.read_table(storage.join(config.dataset_dir, contract.REJECTS_DIR)).to_pylist()
    assert len(rejected) == sum(rejects.values())
    assert all(r["source"].startswith("file://") for r in rejected)
    corrupt = [r for r in rejected if r["reject_reason"] == "corrupt_file"]
    assert corrupt[0]["source"].endswith("b.jsonl.gz") and "decompress" in corrupt[0]["record"]


def test_row_groups_hold_row_group_rows_but_each_tasks_last_two_and_the_manifest_says_what_the_footers_do(messy):
    config, manifest, *_ = messy
    for name, stats in manifest.splits.items():
        footers = []
        for path in manifest.split_files(config.dataset_dir, name):
            meta = pq.ParquetFile(path).metadata
            groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
            # Full groups, then the last two sharing the rest evenly (a task's only group may be short).
            assert groups[:-2] == [16] * (len(groups) - 2) and 0 < min(groups) and max(groups) <= 16, (path, groups)
            assert len(groups) == 1 or abs(groups[-1] - groups[-2]) <= 1, (path, groups)
            footers += groups
        assert footers == stats.row_group_rows and len(footers) == stats.num_row_groups
        assert sum(footers) == stats.rows
        assert stats.num_files == len(stats.files) <= config.preprocess.num_partitions  # at most one per task here
        masks = pa.concat_tables([pq.read_table(p, columns=[contract.ATTENTION_MASK])
                                  for p in split_files(config.dataset_dir, name)])
        assert stats.padding_tokens == int(np.sum(masks.column(0).combine_chunks().flatten().to_numpy() == 0))
        assert sum(stats.length_histogram.values()) == stats.documents


def test_petastorm_ranks_get_the_same_number_of_rows(messy):
    # The files' row groups differ in size, and the reader still gives each rank the same number of
    # full batches, no row twice, through the Petastorm backend and the manifest's file list.
    pytest.importorskip("petastorm", reason="the petastorm stack's reader (the current stack has none)")
    from training.data import iter_batches, split_spec

    config, manifest, *_ = messy
    per_rank = []
    for rank in range(2):
        spec = split_spec(config.dataset_dir, manifest, "train", batch_size=4, columns=(contract.ID_COLUMN,),
                          shuffle=True, rank=rank, world_size=2, drop_last=True, backend="petastorm")
        per_rank.append([i for batch in iter_batches(spec) for i in batch[contract.ID_COLUMN]])
    assert len(per_rank[0]) == len(per_rank[1]) > 0
    assert not set(per_rank[0]) & set(per_rank[1])
    assert manifest.splits["train"].rows - 2 * len(per_rank[0]) < 2 * 4  # fewer than a global batch left out


def test_a_forced_rebuild_into_the_same_run_dir_writes_the_same_shards_and_fingerprint(spark, built):
    config, manifest, _ = built
    before = {s: split_table(config.dataset_dir, s) for s in contract.SPLITS}
    rebuilt = build_dataset(spark, config)  # what --force does: a full rebuild into the same run_dir
    assert rebuilt.tokenizer_sha256 == manifest.tokenizer_sha256
    for name, table in before.items():
        assert split_table(config.dataset_dir, name).equals(table), name
    assert rebuilt.dataset_fingerprint == manifest.dataset_fingerprint  # nothing downstream reruns

    def without_files(splits):
        return {name: stats.model_copy(update={"files": []}) for name, stats in splits.items()}

    assert without_files(rebuilt.splits) == without_files(manifest.splits)
    assert [[f.sha256 for f in s.files] for s in rebuilt.splits.values()] == [
        [f.sha256 for f in s.files] for s in manifest.splits.values()]


def test_written_rows_are_the_padded_encoding_of_the_documents(spark, built):
    """The writers pad binary token rows; the result is what encode_padded gives for the same
    documents, row for row (ids, tokens, mask, label, num_tokens), in every split."""
    from pyspark.sql import functions as F
    from pyspark.testing import assertDataFrameEqual

    from pipeline.tokenizer import backend_json, load_tokenizer
    from spark_jobs import clean, encode
    from spark_jobs.preprocess import contract_columns, documents_by_content, read_clean

    config, _, _ = built
    manifest = contract.load_manifest(config.dataset_dir)  # an earlier test may have rebuilt it
    files = read.resolve_input_files(config.data.input)
    good, _ = read.split_rejects(read_clean(spark, config, files))
    good = good.transform(lambda d: clean.with_ids(d, id_from_input=False))
    ordered = documents_by_content(good, config, manifest.label_map,
                                   read.num_partitions_for(files, config.preprocess.num_partitions))
    tokenizer = load_tokenizer(config.tokenizer_dir)
    expected = encode.encode_padded(
        ordered.select(contract.ID_COLUMN, "split", read.TEXT, contract.LABEL), backend_json(tokenizer),
        config.preprocess.max_length, tokenizer.pad_token_id,
    ).select("split", *contract_columns("classification"))
    written = None
    for name in contract.SPLITS:
        part = spark.read.parquet(*manifest.split_files(config.dataset_dir, name)).withColumn("split", F.lit(name))
        written = part if written is None else written.unionByName(part)
    assertDataFrameEqual(written.select("split", *contract_columns("classification")), expected)



def test_a_fresh_run_dir_builds_the_same_dataset(spark, built, contents_of, tmp_path):
    # A trained (wordpiece) tokenizer, another fresh run_dir on the shared local[2] session. Another JVM
    # on local[1] (spark-submit) builds the same bytes in test_quality.py (this config with every
    # quality rule on) and test_causal_lm.py (BPE, packed): one spark-submit each, not one per config.
    config, manifest, _ = built
    again = build_config({**config.to_dict(), "run_dir": str(tmp_path / "again")})
    build_dataset(spark, again)
    first = contents_of(config.dataset_dir)
    assert first["shards"] and first["tokenizer"]
    assert contents_of(again.dataset_dir) == first
    assert storage.read_bytes(storage.join(again.tokenizer_dir, "tokenizer.json")) == first["tokenizer"]["tokenizer.json"]


def test_a_row_lost_after_dedup_fails_the_job_and_publishes_nothing(spark, tmp_path, monkeypatch):
    # Fault injected from the test: the split step loses one document. The job must not count it as
    # a duplicate (as it once did) but refuse to publish.
    texts = [f"document number {i} about event loops" for i in range(30)] + ["document number 0 about event loops"]
    corpus = write_jsonl([{"text": t, "label": "a"} for t in texts], tmp_path / "corpus.jsonl")
    lost_id = hashlib.sha256(texts[7].encode()).hexdigest()[:32]  # ids are the cleaned text's hash
    with_split = split.with_split
    monkeypatch.setattr(split, "with_split", lambda df, *args: with_split(df, *args).filter(F.col("id") != lost_id))
    config = build_config({
        "run_dir": str(tmp_path / "run"),
        "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 100}},
        "preprocess": {"max_length": 8, "num_partitions": 2, "shard": {"row_group_rows": 8}},
    })
    with pytest.raises(AccountingError, match=r"input_records 31 != documents 29 \+ rejected 0 \+ "
                                              r"duplicates_removed 1 \+ removed by quality rules 0 \(\+1 records unaccounted for\)"):
        build_dataset(spark, config)
    assert storage.info(storage.join(config.dataset_dir, contract.SUCCESS_FILE)) is None
    assert storage.info(storage.join(config.dataset_dir, contract.MANIFEST_FILE)) is None


def test_the_tokenizer_sample_does_not_depend_on_partitioning_or_order(spark):
    from spark_jobs.preprocess import training_sample

    texts = [f"text number {i}" for i in range(2000)]
    one = spark.createDataFrame([(t,) for t in texts], "text string").repartition(1)
    five = spark.createDataFrame([(t,) for t in reversed(texts)], "text string").repartition(5)
    sample = training_sample(one, sample_size=300, num_texts=2000, seed=3)
    assert training_sample(five, sample_size=300, num_texts=2000, seed=3) == sample
    assert 200 < len(sample) < 400 and set(sample) <= set(texts)  # about sample_size, Bernoulli-drawn
    assert training_sample(one, sample_size=300, num_texts=2000, seed=4) != sample
    assert training_sample(five, sample_size=5000, num_texts=2000, seed=3) == sorted(texts)


def test_with_dedup_off_the_dataset_is_a_function_of_the_records_not_of_their_order(spark, tmp_path, docstring_records,
                                                                                     contents_of):
    """Without de-duplication every record is kept, copies included: the dataset is still a function
    of the records alone (README, "Sharding"), whatever their order and files. The corpus holds
    exact copies and one text under two labels, whose ids tie."""
    records = docstring_records[::9]
    other = next(r["label"] for r in records if r["label"] != records[7]["label"])
    records = records + records[:5] + [{**records[7], "label": other}]
    reordered = records[::-1]
    builds = []
    for name, files in (("in-order", [records]), ("reordered", [reordered[::2], reordered[1::2]])):
        corpus = tmp_path / name
        for number, part in enumerate(files):
            write_jsonl(part, corpus / f"part-{number}.jsonl")
        config = build_config({
            "run_dir": str(tmp_path / f"{name}-run"), "data": {"input": str(corpus), "label_column": "label"},
            "tokenizer": {"train": {"vocab_size": 400}},
            "preprocess": {"max_length": 32, "seed": 5, "num_partitions": 3, "dedup": False},
        })
        manifest = build_dataset(spark, config)
        assert manifest.duplicates_removed == 0 and manifest.input_records == len(records)
        contents = contents_of(config.dataset_dir)
        for key in ("input_files", "dataset_fingerprint", "config"):  # where the records were, not what
            contents["manifest"].pop(key)
        builds.append(contents)
    assert builds[0]["shards"] == builds[1]["shards"]
    assert builds[0] == builds[1]


def test_the_commit_writes_the_manifest_then_success_last_and_deletes_files_left_during_the_build(
        spark, tmp_path, monkeypatch):
    """The commit protocol below e2e: strays that appear during the build (a failed attempt's shard
    and rejects file) are deleted, not only reported, and the driver's last two writes are the
    manifest, then _SUCCESS."""
    from spark_jobs import preprocess

    texts = [f"document number {i} about event loops" for i in range(40)]
    corpus = write_jsonl([{"text": t, "label": "ab"[i % 2]} for i, t in enumerate(texts)], tmp_path / "corpus.jsonl")
    config = build_config({
        "run_dir": str(tmp_path / "run"), "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"train": {"vocab_size": 100}},
        "preprocess": {"max_length": 8, "num_partitions": 2, "shard": {"row_group_rows": 8}},
    })
    strays = ["train/part-00099-00000-deadbeef-attempt1.parquet", "rejects/part-00099-attempt1.parquet",
              "val/part-00001-00000-deadbeef-attempt7.parquet"]
    begin_build = preprocess.begin_build

    def begin_then_a_failed_attempt_writes(dataset_dir):  # what a killed or retried task leaves behind
        build_id = begin_build(dataset_dir)
        for name in strays:
            storage.write_bytes(storage.join(dataset_dir, name), b"PAR1 not a real shard")
        return build_id

    writes = []
    write_bytes = storage.write_bytes
    monkeypatch.setattr(preprocess, "begin_build", begin_then_a_failed_attempt_writes)
    monkeypatch.setattr(storage, "write_bytes", lambda uri, data: (writes.append(str(uri)), write_bytes(uri, data)))
    manifest = build_dataset(spark, config)
    for name in strays:
        assert storage.info(storage.join(config.dataset_dir, name)) is None, f"{name} was left in the dataset"
    listed = {f.path for s in manifest.splits.values() for f in s.files} | {f.path for f in manifest.rejects_files}
    on_disk = {storage.relative(e.uri, config.dataset_dir) for e in storage.list_files(config.dataset_dir)}
    assert {name for name in on_disk if name.endswith(".parquet")} == listed
    assert [storage.basename(uri) for uri in writes[-2:]] == [contract.MANIFEST_FILE, contract.SUCCESS_FILE]
    assert sum(1 for uri in writes if storage.basename(uri) == contract.SUCCESS_FILE) == 1


def test_the_job_sizes_spark_shuffles_while_it_runs_and_puts_the_session_values_back(spark):
    before = {key: spark.conf.get(key) for key in (SHUFFLE_PARTITIONS, ADVISORY_PARTITION_BYTES)}
    with pytest.raises(RuntimeError, match="a failed stage"):
        with sized_shuffles(spark, 7, 5 << 20):
            assert spark.conf.get(SHUFFLE_PARTITIONS) == "7"
            assert spark.conf.get(ADVISORY_PARTITION_BYTES) == str(5 << 20)
            raise RuntimeError("a failed stage")
    assert {key: spark.conf.get(key) for key in before} == before


@pytest.mark.parametrize("input_bytes, advisory", [(0, 1 << 20), (5 << 20, 5 << 20), (128 << 20, 64 << 20)])
def test_coalesced_shuffle_partitions_hold_what_a_read_task_reads_within_spark_bounds(spark, input_bytes, advisory):
    with sized_shuffles(spark, 3, input_bytes):
        assert spark.conf.get(ADVISORY_PARTITION_BYTES) == str(advisory)
