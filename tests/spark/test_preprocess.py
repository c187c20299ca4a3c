import json

import pyarrow.parquet as pq
import pytest

from pipeline import contract
from pipeline.config import build_config
from pipeline.demo import write_jsonl
from spark_jobs.preprocess import DatasetConflictError, build_dataset, check_existing


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
        "preprocess": {"max_length": 32, "seed": 3, "shard": {"row_group_rows": 64}},
    })
    return config, build_dataset(spark, config), records


def test_manifest_accounts_for_every_input_record(built):
    config, manifest, records = built
    assert manifest.input_records == len(records) + 2
    assert manifest.rejected_by_reason == {"malformed_record": 1, "empty_text": 1}
    assert sum(s.rows for s in manifest.splits.values()) == len(records)
    assert manifest.label_map == {"asyncio": 0, "email": 1, "logging": 2, "tkinter": 3}
    assert manifest.pad_id == 0 and manifest.max_length == 32
    assert manifest.tokenizer_sha256 == contract.file_sha256(config.tokenizer_dir / "tokenizer.json")
    on_disk = contract.load_manifest(config.dataset_dir)
    assert on_disk == manifest


def test_shards_hold_fixed_length_rows_that_decode_back(built):
    from pipeline.tokenizer import load_tokenizer

    config, manifest, records = built
    tokenizer = load_tokenizer(config.dataset_dir / "tokenizer")
    table = pq.read_table(contract.split_dir(config.dataset_dir, "train"))
    assert table.num_rows == manifest.splits["train"].rows
    assert sum(manifest.splits["train"].row_group_rows) == table.num_rows
    by_text = {r["text"]: r["label"] for r in records}
    labels = {i: name for name, i in manifest.label_map.items()}
    row = table.slice(0, 1).to_pylist()[0]
    assert len(row[contract.INPUT_IDS]) == 32 and len(row[contract.ATTENTION_MASK]) == 32
    decoded = tokenizer.decode(row[contract.INPUT_IDS], skip_special_tokens=True)
    matches = [t for t in by_text if tokenizer.decode(tokenizer(t, truncation=True, max_length=32)["input_ids"], skip_special_tokens=True) == decoded]
    assert matches and by_text[matches[0]] == labels[row[contract.LABEL]]
    assert sum(manifest.splits[s].tokens for s in contract.SPLITS) == manifest.token_count


def test_rerun_skips_and_a_changed_config_is_refused(built):
    config, _, _ = built
    assert check_existing(config, force=False) is True
    changed = build_config({**config.to_dict(), "preprocess": {**config.to_dict()["preprocess"], "max_length": 64}})
    with pytest.raises(DatasetConflictError, match=r"sections \['preprocess'\] differ"):
        check_existing(changed, force=False)
    assert check_existing(changed, force=True) is False
