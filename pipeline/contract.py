"""The dataset contract: what the Spark side writes and the training side reads.

Both sides import this module and nothing else to agree on column names, dtypes, the layout of a
dataset directory and the manifest. Bump SCHEMA_VERSION whenever any of it changes meaning.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipeline import storage
from pipeline.errors import ShardlineError

# 1: classification rows (id, input_ids, attention_mask, label), manifest.json + _SUCCESS.
# 2: causal_lm rows (position_ids, segment_ids); row groups per split a multiple of shard.divisible_by;
#    manifest gains documents, padding/truncation/packing counts, histograms. Version-1 manifests still load.
# 3: the manifest is the dataset's index: every data and rejects file with its bytes, row groups and
#    sha256 (writer tasks write unique attempt names; only the files listed are the dataset), and one
#    dataset_fingerprint that the job's skip check, the driver and the trainer all compare.
# 4: each tokenizing task writes its own files per split (part-<partition>-<sequence>): row groups of
#    shard.row_group_rows rows but a task's last two, no longer a multiple of shard.divisible_by (gone).
#    Same columns and manifest; a reader that deals rows out by row group gets uneven ranks now.
# 5: corpus quality (preprocess.quality): the manifest counts removals by rule (removed_by_rule) and
#    lists a sample of them (removed_files); the identity gains that term. Classification rows carry
#    language / language_score when quality.language is set. Rows and the rest of the manifest as 4.
SCHEMA_VERSION = 5
# The trainer reads all three: its reader shares rows evenly at row granularity, whatever the row groups.
READABLE_SCHEMA_VERSIONS = (3, 4, 5)

# Column names. Token columns are list<int32>: Spark 3.5's Arrow path rejects FixedSizeList.
ID_COLUMN = "id"  # stable document id (string); drives the split, so it must not depend on order
INPUT_IDS = "input_ids"  # list<int32>, exactly max_length long
ATTENTION_MASK = "attention_mask"  # list<int8>, 1 for real tokens, 0 for padding
LABEL = "label"  # int32 class id, index into manifest.label_map
NUM_TOKENS = "num_tokens"  # int32, real (non-pad) tokens in the row, for accounting and histograms
# causal_lm rows (packed blocks of max_length tokens, several documents per block):
POSITION_IDS = "position_ids"  # list<int32>, restarts at 0 at each document start inside a block
SEGMENT_IDS = "segment_ids"  # list<int32>, 1, 2, ... per document within the block; 0 for padding
# With preprocess.quality.language (classification rows; a packed block mixes documents):
LANGUAGE = "language"  # string, lid.176's top language code (en, de, ...)
LANGUAGE_SCORE = "language_score"  # float32, its score in [0, 1]

TASKS = ("classification", "causal_lm")

SPLITS = ("train", "val", "test")
# The config sections a dataset depends on: the Spark job's skip/refuse check and the driver's
# preprocess marker both use this, so they cannot disagree about when a dataset is stale.
DATASET_SECTIONS = ("data", "tokenizer", "preprocess")
MANIFEST_FILE = "manifest.json"
SUCCESS_FILE = "_SUCCESS"  # written after the manifest; a dataset without it is never read
REJECTS_DIR = "rejects"
REMOVED_DIR = "removed"  # a sample of what each quality rule removed, per read task
REMOVED_BY = "removed_by"  # removed/ files: the quality rule that removed the record
DUPLICATE_OF = "duplicate_of"  # removed/ files, near_dedup: the id of the document kept in its place


class DataFile(BaseModel):
    """One Parquet file of the dataset, as its writer task reported it."""

    model_config = ConfigDict(extra="forbid")
    path: str  # relative to the dataset directory, '/'-separated: train/part-00000-<attempt>.parquet
    bytes: int
    row_group_rows: list[int]  # rows per row group, in order
    sha256: str  # of the whole file: a reader refuses a file that changed after publishing


class SplitStats(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rows: int
    tokens: int  # real (non-pad) tokens
    num_files: int
    num_row_groups: int
    row_group_rows: list[int] = Field(default_factory=list)  # rows per row group, in file order
    # Schema 2 (defaults keep version-1 manifests readable):
    documents: int = 0  # input documents in this split (rows differ with stride windows or packing)
    padding_tokens: int = 0  # pad positions in the token columns
    padding_fraction: float = 0.0  # padding_tokens / (rows * max_length)
    truncated_documents: int = 0  # classification without stride: documents cut at max_length
    truncated_fraction: float = 0.0  # truncated_documents / documents
    dropped_tokens: int = 0  # causal_lm with drop_remainder: tokens of the dropped partial blocks
    length_histogram: dict[str, int] = Field(default_factory=dict)  # documents by token count, "<=N" bins
    # Schema 3: the split's files in read order (their row groups, concatenated, are row_group_rows).
    files: list[DataFile] = Field(default_factory=list)


class Manifest(BaseModel):
    """Written last into the dataset directory; everything downstream trusts only this file."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int
    task: str
    max_length: int
    vocab_size: int
    pad_id: int
    tokenizer_sha256: str
    label_map: dict[str, int]  # label string -> class id
    input_records: int
    rejected_records: int
    rejected_by_reason: dict[str, int]
    duplicates_removed: int = 0
    eos_id: int | None = None  # causal_lm: the token that ends every packed document
    token_count: int
    splits: dict[str, SplitStats]
    input_files: list[dict[str, Any]] = Field(default_factory=list)
    # Schema 3: what the dataset is, as one hash (see dataset_fingerprint), and the rejects' files.
    dataset_fingerprint: str = ""
    rejects_files: list[DataFile] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    # Schema 5: records removed by each quality rule (all counted, as the removal writers saw them),
    # and the files holding a sample of them.
    removed_by_rule: dict[str, int] = Field(default_factory=dict)
    removed_files: list[DataFile] = Field(default_factory=list)
    config: dict[str, Any]  # the resolved config the dataset was built from

    @property
    def num_labels(self) -> int:
        return len(self.label_map)

    def split_files(self, dataset_dir: str, split: str) -> list[str]:
        """The split's data files (URIs) in read order: only these are the dataset; anything else
        under dataset_dir (an attempt of a failed or speculative task) is not."""
        return [storage.join(str(dataset_dir), f.path) for f in self.splits[split].files]


def split_dir(dataset_dir: str, split: str) -> str:
    return storage.join(str(dataset_dir), split)


def dataset_fingerprint(config: dict[str, Any], input_files: list[dict[str, Any]]) -> str:
    """The dataset's identity: schema version + the config sections it is built from + its input
    files (path, bytes, modification time). Nothing wall-clock: a rebuild of the same input with
    the same config has the same fingerprint, so nothing downstream reruns."""
    payload = {
        "schema_version": SCHEMA_VERSION,
        "config": {name: config.get(name) for name in DATASET_SECTIONS},
        "input_files": input_files,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def write_json_atomic(uri: str, payload: Any) -> None:
    """Write JSON so that a reader sees either the old file or the whole new one, never a part."""
    storage.write_text(str(uri), json.dumps(payload, indent=2, sort_keys=True) + "\n")


class DatasetConflictError(ShardlineError):
    """The run_dir holds a dataset built from another config or other input files."""


def changed_dataset_sections(manifest: Manifest, config: dict[str, Any]) -> list[str]:
    """The DATASET_SECTIONS in which a config (as a dict) differs from the one a dataset was built
    from: the Spark job refuses to overwrite such a dataset without --force, and the driver says so
    before starting it."""
    return sorted(name for name in DATASET_SECTIONS if config.get(name) != manifest.config.get(name))


class DatasetNotReadyError(ShardlineError):
    """A dataset directory without _SUCCESS: its preprocess job never finished there."""


def load_manifest(dataset_dir: str) -> Manifest:
    """Read a finished dataset's manifest; refuse a dataset whose job did not complete."""
    dataset_dir = str(dataset_dir)
    if storage.info(storage.join(dataset_dir, SUCCESS_FILE)) is None:
        raise DatasetNotReadyError(
            f"{dataset_dir} has no {SUCCESS_FILE}: the preprocess job did not finish there. "
            "Run `shardline preprocess` (with --force to rebuild) before training."
        )
    return Manifest.model_validate_json(storage.read_text(storage.join(dataset_dir, MANIFEST_FILE)))


def file_sha256(uri: str) -> str:
    return storage.sha256(str(uri))
