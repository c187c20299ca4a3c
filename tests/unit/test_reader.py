"""The reader's plan and order: deterministic, rank-even, resumable, on pyarrow-written datasets."""
import math
import time

import pytest

from parquet_datasets import write_classification_dataset
from pipeline import contract
from training.data import TASK_COLUMNS, BackgroundBatches, iter_batches, plan_epoch, split_spec

COLUMNS = TASK_COLUMNS["classification"] + (contract.ID_COLUMN,)
UNEVEN = [[50, 7], [30, 3], [21]]  # five row groups of very different sizes in three files


@pytest.fixture(scope="module")
def uneven(tmp_path_factory):
    directory = tmp_path_factory.mktemp("uneven") / "dataset"
    return directory, write_classification_dataset(directory, UNEVEN)


def _spec(dataset, **options):
    directory, manifest = dataset
    settings = dict(batch_size=8, columns=COLUMNS, shuffle=True, seed=5, num_workers=2, num_shuffle_row_groups=2)
    settings.update(options)
    return split_spec(directory, manifest, "train", **settings)


def _ids(spec, epoch=0, start_batch=0):
    return [[i for i in batch[contract.ID_COLUMN]] for batch in iter_batches(spec, epoch, start_batch)]


def test_one_process_sees_every_row_once_per_epoch_in_a_seeded_order(uneven):
    spec = _spec(uneven)
    all_ids = {f"doc-{i:06d}" for i in range(111)}
    first, again, second_epoch = _ids(spec), _ids(spec), _ids(spec, epoch=1)
    assert sorted(i for batch in first for i in batch) == sorted(all_ids)
    assert [len(b) for b in first] == [8] * 13 + [7]
    assert first == again  # two parallel Petastorm streams, same order every run
    assert sorted(i for b in second_epoch for i in b) == sorted(all_ids) and second_epoch != first
    assert _ids(_spec(uneven, seed=6)) != first


@pytest.mark.parametrize("world_size", [2, 3])
def test_uneven_shards_give_every_rank_the_same_batch_count_and_disjoint_rows(uneven, world_size):
    sizes = [rows for file_groups in UNEVEN for rows in file_groups]
    rows_per_rank = [sum(sizes[rank::world_size]) for rank in range(world_size)]
    assert len(set(rows_per_rank)) == world_size  # genuinely uneven
    expected_batches = min(math.ceil(rows / 8) for rows in rows_per_rank)
    seen = []
    for rank in range(world_size):
        spec = _spec(uneven, rank=rank, world_size=world_size)
        batches = _ids(spec)
        assert len(batches) == plan_epoch(spec, 0).num_batches == expected_batches
        seen.append({i for b in batches for i in b})
        assert sum(len(b) for b in batches) == len(seen[-1])
    assert sum(len(s) for s in seen) == len(set().union(*seen))


def test_starting_mid_epoch_continues_the_same_order(uneven):
    spec = _spec(uneven)
    full = _ids(spec, epoch=1)
    assert _ids(spec, epoch=1, start_batch=5) == full[5:]
    assert _ids(spec, epoch=1, start_batch=len(full)) == []


def test_unshuffled_reads_row_groups_in_file_order(uneven):
    spec = _spec(uneven, shuffle=False, num_workers=1, batch_size=200)
    (batch,) = _ids(spec)
    assert batch == [f"doc-{i:06d}" for i in range(111)]


def test_background_batches_match_and_count_only_the_time_the_consumer_waited(uneven):
    spec = _spec(uneven)
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
    assert 0.5 * elapsed <= eager.wait_seconds <= elapsed, (eager.wait_seconds, elapsed)

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


def test_more_processes_than_row_groups_is_refused(uneven):
    with pytest.raises(ValueError, match="5 row groups for 6 processes"):
        plan_epoch(_spec(uneven, world_size=6), 0)


def test_a_manifest_that_disagrees_with_the_files_is_an_error(tmp_path):
    directory = tmp_path / "dataset"
    manifest = write_classification_dataset(directory, [[10, 6]])
    manifest.splits["train"].row_group_rows = [6, 10]
    with pytest.raises(RuntimeError, match="row group 0 has 10 rows but the manifest says 6"):
        _ids(split_spec(directory, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=False))
