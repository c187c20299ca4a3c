"""The manifest stays readable across schema versions."""
import json

from pipeline import contract


def test_a_version_1_manifest_still_loads(tmp_path):
    v1 = {
        "schema_version": 1, "task": "classification", "max_length": 128, "vocab_size": 4000, "pad_id": 0,
        "tokenizer_sha256": "ab" * 32, "label_map": {"a": 0}, "input_records": 3, "rejected_records": 1,
        "rejected_by_reason": {"empty_text": 1}, "token_count": 40, "config": {},
        "splits": {"train": {"rows": 2, "tokens": 40, "num_files": 1, "num_row_groups": 1, "row_group_rows": [2]}},
    }
    (tmp_path / contract.MANIFEST_FILE).write_text(json.dumps(v1))
    (tmp_path / contract.SUCCESS_FILE).write_text("")
    manifest = contract.load_manifest(str(tmp_path))
    assert manifest.schema_version == 1 and manifest.eos_id is None and manifest.duplicates_removed == 0
    assert manifest.splits["train"].rows == 2 and manifest.splits["train"].documents == 0
    assert manifest.splits["train"].files == [] and manifest.dataset_fingerprint == ""
    assert contract.SCHEMA_VERSION == 5 and contract.READABLE_SCHEMA_VERSIONS == (3, 4, 5)
