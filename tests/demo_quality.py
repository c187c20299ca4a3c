"""The demo corpus with corpus quality on, as the end-to-end runs build it (`shardline run`, the
Airflow DAG): one heuristic filter, the language and near-dedup, beside a planted near copy of the
longest document, so each of the three removes something on the demo's docstrings. Importable from
every tier: tests/ is on sys.path through tests/conftest.py."""
from __future__ import annotations

import json

# top_n_grams off: on short docstrings the top n-gram rules remove more than half the corpus.
QUALITY = {"gopher_repetition": {"top_n_grams": {}}, "language": {"keep": ["en"], "min_score": 0.3}, "near_dedup": {}}
PREPROCESS = {"collapse_whitespace": False, "quality": QUALITY}  # the filters judge lines: keep them
# PREPROCESS as `shardline` arguments (a value in JSON is one in YAML too).
SET_ARGS = [arg for key, value in PREPROCESS.items() for arg in ("--set", f"preprocess.{key}={json.dumps(value)}")]
NEAR_COPY_TAIL = " See also the policy module."


def with_near_copy(records: list[dict]) -> list[dict]:
    """records and, last, the longest one with a sentence added: a near duplicate near-dedup removes."""
    longest = max(records, key=lambda record: len(record["text"]))
    return records + [{**longest, "text": longest["text"] + NEAR_COPY_TAIL}]


def check_removals(manifest: dict) -> None:
    """Every quality stage removed something, the planted copy among them, and every input record is
    a document, a reject, a duplicate or removed by one rule (manifest.json as a dict)."""
    removed = manifest["removed_by_rule"]
    assert {rule.split(".")[0] for rule in removed} == set(QUALITY), removed
    assert removed["near_dedup.near_duplicate"] == 1, removed
    documents = sum(split["documents"] for split in manifest["splits"].values())
    assert manifest["input_records"] == (documents + manifest["rejected_records"] + manifest["duplicates_removed"]
                                         + sum(removed.values()))
