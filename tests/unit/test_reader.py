"""The reader's plan and order: deterministic, rank-even, resumable, reading only the manifest's files,
for both row-group backends (Petastorm, pyarrow.fs) on local disk and on a real S3 server (moto)."""
import importlib.util
import math
import re
import time

import pytest

from parquet_datasets import classification_table, parquet_bytes, write_classification_dataset
from pipeline import contract, storage
from pipeline.config import ConfigError, build_config
from training.data import (
    TASK_COLUMNS, BackgroundBatches, DatasetChangedError, iter_batches, plan_epoch, split_spec,
)

COLUMNS = TASK_COLUMNS["classification"] + (contract.ID_COLUMN,)
UNEVEN = [[50, 7], [30, 3], [21]]  # five row groups of very different sizes in three files
ALL_IDS = sorted(f"doc-{i:06d}" for i in range(111))
# Petastorm cannot be installed on the current stack (.venv-current): its cases skip there.
BACKENDS = (pytest.param("petastorm", marks=pytest.mark.skipif(
    importlib.util.find_spec("petastorm") is None, reason="petastorm is not installed")), "pyarrow")


@pytest.fixture(params=["local", "s3"])
def dataset_dir(request, tmp_path):
    """Where a test's dataset lives: a local directory, or a fresh bucket on the moto S3 server."""
    if request.param == "local":
        return str(tmp_path / "dataset")
    return storage.join(request.getfixturevalue("s3_bucket"), "dataset")


@pytest.fixture
def uneven(dataset_dir):
    return dataset_dir, write_classification_dataset(dataset_dir, UNEVEN)


def _spec(dataset, backend, **options):
    directory, manifest = dataset
    settings = dict(batch_size=8, columns=COLUMNS, shuffle=True, seed=5, num_workers=2, num_shuffle_row_groups=2,
                    backend=backend)
    settings.update(options)
    return split_spec(directory, manifest, "train", **settings)


def _ids(spec, epoch=0, start_batch=0):
    return [list(batch[contract.ID_COLUMN]) for batch in iter_batches(spec, epoch, start_batch)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_process_sees_every_row_once_per_epoch_in_a_seeded_order(uneven, backend):
    spec = _spec(uneven, backend)
    first, again, second_epoch = _ids(spec), _ids(spec), _ids(spec, epoch=1)
    assert sorted(i for batch in first for i in batch) == ALL_IDS
    assert [len(b) for b in first] == [8] * 13 + [7]
    assert first == again  # two row groups read in parallel, same order every run
    assert sorted(i for b in second_epoch for i in b) == ALL_IDS and second_epoch != first
    assert _ids(_spec(uneven, backend, seed=6)) != first


def test_both_backends_give_the_same_batches(uneven):
    pytest.importorskip("petastorm")
    # The order is the reader's plan, not the backend's: switching reader.backend changes nothing.
    for options in ({}, {"rank": 1, "world_size": 2}, {"shuffle": False}):
        assert _ids(_spec(uneven, "petastorm", **options)) == _ids(_spec(uneven, "pyarrow", **options))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_uneven_shards_give_every_rank_the_same_batch_count_and_disjoint_rows(uneven, backend, world_size):
    sizes = [rows for file_groups in UNEVEN for rows in file_groups]
    rows_per_rank = [sum(sizes[rank::world_size]) for rank in range(world_size)]
    assert world_size == 1 or len(set(rows_per_rank)) > 1  # genuinely uneven
    expected_batches = min(math.ceil(rows / 8) for rows in rows_per_rank)
    seen = []
    for rank in range(world_size):
        spec = _spec(uneven, backend, rank=rank, world_size=world_size)
        batches = _ids(spec)
        assert len(batches) == plan_epoch(spec, 0).num_batches == expected_batches
        assert all(len(b) == 8 for b in batches[:-1])
        seen.append({i for b in batches for i in b})
        assert sum(len(b) for b in batches) == len(seen[-1])
    assert sum(len(s) for s in seen) == len(set().union(*seen))  # no row on two ranks
    if world_size == 1:
        assert sorted(seen[0]) == ALL_IDS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rank, world_size, batch_size, num_batches", [(0, 1, 8, 14), (0, 2, 3, 4), (1, 2, 3, 4)])
def test_starting_mid_epoch_continues_the_same_order(uneven, backend, rank, world_size, batch_size, num_batches):
    # One row group per shuffle window, so later starts skip whole windows. With batch 3 on 2 ranks,
    # rank 1 holds 10 rows (4 batches) and rank 0, with 101 rows, takes 4 batches too.
    spec = _spec(uneven, backend, rank=rank, world_size=world_size, batch_size=batch_size, num_shuffle_row_groups=1)
    full = _ids(spec, epoch=1)
    assert len(full) == num_batches
    for start in (1, num_batches // 2, num_batches - 1):
        assert _ids(spec, epoch=1, start_batch=start) == full[start:]
    assert _ids(spec, epoch=1, start_batch=num_batches) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_unshuffled_reads_row_groups_in_file_order(uneven, backend):
    spec = _spec(uneven, backend, shuffle=False, num_workers=1, batch_size=200)
    (batch,) = _ids(spec)
    assert batch == ALL_IDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_row_groups_are_planned_but_not_read(tmp_path, backend):
    # A tiny split can have empty row groups; Petastorm returns nothing for one, so none is asked for.
    manifest = write_classification_dataset(tmp_path, [[8, 0], [0, 7]])
    assert manifest.splits["train"].row_group_rows == [8, 0, 0, 7]
    for rank, world_size, sizes in ((0, 1, [4, 4, 4, 3]), (0, 2, [4, 4]), (1, 2, [4, 3])):
        spec = split_spec(tmp_path, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=True,
                          rank=rank, world_size=world_size, backend=backend)
        batches = _ids(spec)
        assert [len(b) for b in batches] == sizes
        assert len({i for b in batches for i in b}) == sum(sizes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_background_batches_match_and_count_only_the_time_the_consumer_waited(uneven, backend):
    spec = _spec(uneven, backend)
    expected = _ids(spec)[2:]
    eager = BackgroundBatches(spec, epoch=0, start_batch=2)
    try:
        started = time.perf_counter()
        got = [b[contract.ID_COLUMN] for b in eager]
        elapsed = time.perf_counter() - started
    finally:
        eager.close()
    assert got == expected
    # Taking every batch at once, the consumer does little but wait for the reader (its start-up included).
    assert 0.2 * elapsed <= eager.wait_seconds <= elapsed, (eager.wait_seconds, elapsed)

    slow = BackgroundBatches(spec, epoch=0, start_batch=2)
    slept = 0.0
    try:
        started = time.perf_counter()
        for _ in slow:
            before = time.perf_counter()
            time.sleep(0.05)  # a consumer busy with each batch: that time is not waiting
            slept += time.perf_counter() - before
        elapsed = time.perf_counter() - started
    finally:
        slow.close()
    assert 0 < slow.wait_seconds <= elapsed - slept, (slow.wait_seconds, elapsed, slept)


@pytest.mark.parametrize("backend", BACKENDS)
def test_files_not_in_the_manifest_are_never_read(uneven, backend):
    # A failed or speculative task attempt leaves its file beside the published ones; it sorts first.
    directory, manifest = uneven
    stray = classification_table(500_000, 40, 8, 60, 3)
    storage.write_bytes(storage.join(directory, "train", "part-00000-attempt-failed.parquet"), parquet_bytes([stray]))
    spec = _spec(uneven, backend, shuffle=False, batch_size=200)
    assert [i for batch in _ids(spec) for i in batch] == ALL_IDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_changed_data_file_is_refused_naming_it(uneven, backend):
    directory, manifest = uneven
    uri = manifest.split_files(directory, "train")[1]
    data = storage.read_bytes(uri)
    storage.write_bytes(uri, data[:-100])  # truncated
    spec = _spec(uneven, backend, shuffle=False, batch_size=200)
    with pytest.raises(DatasetChangedError, match=re.escape(f"{uri} is {len(data) - 100} bytes but the manifest says {len(data)}")):
        _ids(spec)
    storage.delete(uri)
    with pytest.raises(DatasetChangedError, match=re.escape(f"{uri} is listed in the manifest but is missing")):
        _ids(spec)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_flipped_byte_stops_the_reader_before_any_row_of_that_file(uneven, backend):
    directory, manifest = uneven
    uri = manifest.split_files(directory, "train")[1]  # rows doc-000057 .. doc-000089
    data = bytearray(storage.read_bytes(uri))
    data[len(data) // 3] ^= 0x01  # same size: only the checksum can tell
    storage.write_bytes(uri, bytes(data))
    seen = []
    with pytest.raises(DatasetChangedError, match=re.escape(f"{uri} has sha256 ") + ".*but the manifest says"):
        for batch in iter_batches(_spec(uneven, backend, batch_size=4)):
            seen += batch[contract.ID_COLUMN]
    assert not {f"doc-{i:06d}" for i in range(57, 90)} & set(seen)
    # With checksums off only sizes are checked, and this file's rows are read.
    ids = [i for b in _ids(_spec(uneven, backend, batch_size=4, verify_checksums=False)) for i in b]
    assert "doc-000060" in ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_manifest_whose_row_counts_disagree_with_the_file_is_an_error(dataset_dir, backend):
    manifest = write_classification_dataset(dataset_dir, [[10, 6]])
    manifest.splits["train"].files[0].row_group_rows = [6, 10]
    manifest.splits["train"].row_group_rows = [6, 10]
    spec = split_spec(dataset_dir, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=False, backend=backend)
    uri = manifest.split_files(dataset_dir, "train")[0]
    with pytest.raises(DatasetChangedError, match=re.escape(f"{uri}: row group 0 has 10 rows but the manifest says 6")):
        _ids(spec)


def test_more_processes_than_row_groups_is_refused(tmp_path):
    dataset = (str(tmp_path), write_classification_dataset(tmp_path, UNEVEN))
    with pytest.raises(ValueError, match="5 row groups for 6 processes"):
        plan_epoch(_spec(dataset, "pyarrow", world_size=6), 0)


def test_a_manifest_without_a_file_list_is_refused(tmp_path):
    manifest = write_classification_dataset(tmp_path, UNEVEN)
    manifest.splits["train"].files = []  # what a schema-2 manifest holds
    with pytest.raises(ValueError, match="lists no files for split train.*preprocess --force"):
        split_spec(tmp_path, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=False)


def test_reader_backend_is_a_config_key_defaulting_to_petastorm():
    tree = {"run_dir": "runs/x", "data": {"input": "in.jsonl", "label_column": "label"}, "tokenizer": {"path": "tok"}}
    assert build_config(tree).reader.backend == "petastorm"
    assert build_config(tree, ["reader.backend=pyarrow"]).reader.backend == "pyarrow"
    with pytest.raises(ConfigError, match="config key reader.backend"):
        build_config(tree, ["reader.backend=arrow"])
