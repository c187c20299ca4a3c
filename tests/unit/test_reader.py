"""The reader's plan and order: deterministic, the same global order for any process count, ranks
even at row granularity, resumable (also elastically) through the stateful loader, reading only the
manifest's files (and, on a seek, only the windows still needed), for both row-group backends
(Petastorm, pyarrow.fs) on local disk and on a real S3 server (moto)."""
import importlib.util
import re
import time

import numpy as np
import pytest

from parquet_datasets import classification_table, parquet_bytes, write_classification_dataset
from pipeline import contract, storage
from pipeline.config import ConfigError, build_config
from training.data import (
    TASK_COLUMNS, BackgroundBatches, _stream, DatasetChangedError, StatefulLoader, iter_batches, plan_epoch, split_spec,
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


def test_each_epoch_orders_both_the_row_groups_and_the_rows_inside_them_anew(uneven):
    """The two sources of an epoch's order, each on its own: windows of one row group, so the
    sequence of row groups and each row group's row order can be read off the stream."""
    spec = _spec(uneven, "pyarrow", num_shuffle_row_groups=1)
    bounds = np.cumsum([0, *(rows for file in UNEVEN for rows in file)])

    def row_group_of(sample):
        return int(np.searchsorted(bounds, int(sample.split("-")[1]), side="right")) - 1

    epochs = [[i for batch in _ids(spec, epoch=e) for i in batch] for e in range(3)]
    sequences = [list(dict.fromkeys(row_group_of(i) for i in ids)) for ids in epochs]
    assert all(sorted(s) == list(range(5)) for s in sequences)
    assert sequences[0] != sequences[1] and sequences[1] != sequences[2], sequences
    for group in (0, 2):  # the two big row groups (50 and 30 rows): their rows come in another order each epoch
        inside = [[i for i in ids if row_group_of(i) == group] for ids in epochs]
        assert inside[0] != inside[1] and inside[1] != inside[2]


def test_both_backends_give_the_same_batches(uneven):
    pytest.importorskip("petastorm")
    # The order is the reader's plan, not the backend's: switching reader.backend changes nothing.
    for options in ({}, {"rank": 1, "world_size": 2, "drop_last": True}, {"shuffle": False}):
        assert _ids(_spec(uneven, "petastorm", **options)) == _ids(_spec(uneven, "pyarrow", **options))


def test_the_petastorm_backend_reads_through_petastorms_worker_set_up_once_per_file_from_many_threads(
        uneven, monkeypatch):
    """Petastorm's ArrowReaderWorker reads every row group (nothing bypasses it); its set-up (dataset,
    schema, pieces) is built once per file, not per row group; eight threads reading the same row
    groups at once each get exactly their own row group's rows, as pyarrow reads them."""
    pytest.importorskip("petastorm")
    from concurrent.futures import ThreadPoolExecutor

    from training.backends import open_source, petastorm_source

    built, processed = [], []

    class CountingWorker(petastorm_source.ArrowReaderWorker):
        def __init__(self, *args):
            built.append(args[2][0])  # the file's paths
            super().__init__(*args)

        def process(self, piece_index, *args):
            processed.append(piece_index)
            return super().process(piece_index, *args)

    monkeypatch.setattr(petastorm_source, "ArrowReaderWorker", CountingWorker)
    files = _spec(uneven, "pyarrow").files
    reads = [(file, row_group) for file in files for row_group in range(len(file.row_group_rows))] * 6
    columns = list(COLUMNS)
    expected_source, source = open_source("pyarrow", files), open_source("petastorm", files)
    try:
        expected = {(f.uri, g): expected_source.read(f, g, columns) for f, g in reads}
        with ThreadPoolExecutor(max_workers=8) as pool:
            got = list(pool.map(lambda read: source.read(*read, columns), reads))
        with pytest.raises(IndexError, match="has 2 row groups; row group 2 was asked for"):
            source.read(files[0], 2, columns)
    finally:
        source.close()
        expected_source.close()
    for (file, row_group), columns_read in zip(reads, got):
        want = expected[(file.uri, row_group)]
        assert sorted(columns_read) == sorted(want)
        for name, values in want.items():
            assert (columns_read[name] == values).all(), (file.uri, row_group, name)
    assert len(built) == len(files)
    assert sorted(processed) == sorted(g for _, g in reads)


def _rank_spec(dataset, backend, world_size, rank=0, global_batch=12, **options):
    # The same global batch split over world_size ranks (12 = 12 x 1 = 6 x 2 = 4 x 3 = 3 x 4).
    return _spec(dataset, backend, rank=rank, world_size=world_size, batch_size=global_batch // world_size,
                 drop_last=True, **options)


def _global_stream(dataset, backend, world_size, epoch=0, **options):
    """Every rank's batches of an epoch, put back in global order: round k is micro-batch k of rank 0, 1, ..."""
    per_rank = [_ids(_rank_spec(dataset, backend, world_size, rank, **options), epoch) for rank in range(world_size)]
    assert len({len(batches) for batches in per_rank}) == 1  # every rank the same number of batches
    return [i for round_ in zip(*per_rank) for batch in round_ for i in batch]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_five_uneven_row_groups_give_every_rank_the_same_batch_count_and_disjoint_rows(uneven, backend, world_size):
    # Row groups of 50, 7, 30, 3, 21 rows: no rank count divides them evenly, and 4 ranks share 5 of them.
    seen, counts = [], []
    for rank in range(world_size):
        spec = _spec(uneven, backend, rank=rank, world_size=world_size, batch_size=8, drop_last=True)
        batches = _ids(spec)
        counts.append(len(batches))
        assert len(batches) == plan_epoch(spec, 0).num_batches
        assert all(len(b) == 8 for b in batches)
        seen.append({i for b in batches for i in b})
        assert sum(len(b) for b in batches) == len(seen[-1])
    assert len(set(counts)) == 1
    assert sum(len(s) for s in seen) == len(set().union(*seen))  # no row on two ranks
    left_out = set(ALL_IDS) - set().union(*seen)
    assert len(left_out) == 111 % (8 * world_size) == plan_epoch(spec, 0).left_out < 8 * world_size


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_global_order_is_the_same_for_any_process_count(uneven, backend):
    # With the same global batch, the ranks' batches put back together are one and the same sequence:
    # what lets a run checkpointed on N processes continue on M.
    streams = {world_size: _global_stream(uneven, backend, world_size, epoch=1) for world_size in (1, 2, 3, 4)}
    assert len(streams[1]) == 108 and len(set(streams[1])) == 108  # 9 global batches of 12; 3 rows left out
    assert all(stream == streams[1] for stream in streams.values())
    assert _global_stream(uneven, backend, 2, epoch=0) != streams[1]  # another epoch, another order


def _loader(dataset, world_size=1, rank=0, global_batch=12, **options):
    return StatefulLoader(_rank_spec(dataset, "pyarrow", world_size, rank, global_batch, **options), num_prefetch=2)


def _take(loader, count):
    """count batches from the loader, across epoch ends, as lists of ids."""
    taken = []
    while len(taken) < count:
        for batch in loader:
            taken.append(list(batch[contract.ID_COLUMN]))
            if len(taken) == count:
                break
    return taken


@pytest.mark.parametrize("position", ["very start", "mid row group", "last batch", "epoch boundary"])
def test_the_loader_resumes_at_any_position_as_if_never_stopped(uneven, position):
    # One row group per window; batches of 4 on one rank, 27 an epoch (108 of 111 rows).
    reference = _loader(uneven, global_batch=4, num_shuffle_row_groups=1)
    try:
        assert reference.num_batches == 27
        straight = _take(reference, 2 * 27)
    finally:
        reference.close()
    done = {"very start": 0, "mid row group": 13, "last batch": 26, "epoch boundary": 27}[position]
    first = _loader(uneven, global_batch=4, num_shuffle_row_groups=1)
    try:
        before = _take(first, done)
        state = first.state_dict()
    finally:
        first.close()
    assert state == {"epoch": done // 27, "samples": 4 * (done % 27), "global_batch": 4, "world_size": 1}
    second = _loader(uneven, global_batch=4, num_shuffle_row_groups=1)
    try:
        second.load_state_dict(state)
        after = _take(second, 2 * 27 - done)
    finally:
        second.close()
    assert before + after == straight


def test_a_position_from_two_ranks_resumes_on_three_with_every_sample_once(uneven):
    def global_rounds(world_size, skip_rounds, state=None, rounds=None):
        loaders = [_loader(uneven, world_size, rank) for rank in range(world_size)]
        try:
            for loader in loaders:
                if state is not None:
                    loader.load_state_dict(state)
            per_rank = [_take(loader, rounds) for loader in loaders]
            return [i for round_ in zip(*per_rank) for b in round_ for i in b], loaders[0].state_dict()
        finally:
            for loader in loaders:
                loader.close()

    straight, _ = global_rounds(1, 0, rounds=9)  # one epoch: 9 global batches of 12
    head, state = global_rounds(2, 0, rounds=4)  # 4 of them on 2 ranks (6 each)
    assert state == {"epoch": 0, "samples": 48, "global_batch": 12, "world_size": 2}
    tail, _ = global_rounds(3, 0, state=state, rounds=5)  # the other 5 on 3 ranks (4 each)
    assert head + tail == straight and len(set(straight)) == 108
    with pytest.raises(ValueError, match=re.escape("global batch of 12 samples, and this run's is 8 (batch_size 4 x "
                                                   "2 processes x grad_accum_steps 1); keep the product the same")):
        _loader(uneven, 2, global_batch=8).load_state_dict(state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_seek_reads_only_the_windows_that_hold_the_remaining_samples(tmp_path, backend):
    # One file per row group: the files holding only earlier windows are deleted, so reading any of
    # them would fail (check_file: "listed in the manifest but is missing").
    dataset = (str(tmp_path), write_classification_dataset(tmp_path, [[20], [20], [20], [20], [20], [20]]))
    spec = _spec(dataset, backend, batch_size=10, drop_last=True, num_shuffle_row_groups=2)
    plan = plan_epoch(spec, 3)
    full = _ids(spec, epoch=3)
    assert len(plan.windows) == 3 and len(full) == 12
    keep = set(plan.windows[-1])
    for index, uri in enumerate(dataset[1].split_files(str(tmp_path), "train")):
        if index not in keep:
            storage.delete(uri)
    assert _ids(spec, epoch=3, start_batch=9) == full[9:]  # the last window's second half


def test_fewer_row_groups_than_ranks_and_too_small_a_dataset(tmp_path):
    dataset = (str(tmp_path), write_classification_dataset(tmp_path, [[10, 9]]))
    batches = [_ids(_spec(dataset, "pyarrow", rank=rank, world_size=6, batch_size=3, drop_last=True)) for rank in range(6)]
    assert [len(b) for b in batches] == [1] * 6  # 18 of 19 rows, 3 on each of 6 ranks from 2 row groups
    assert len({i for b in batches for batch in b for i in batch}) == 18
    with pytest.raises(ValueError, match=re.escape("has 19 samples, fewer than one global batch of 20 (train.batch_size "
                                                   "10 x 2 processes x train.grad_accum_steps 1); lower one of them")):
        StatefulLoader(_spec(dataset, "pyarrow", world_size=2, batch_size=10, drop_last=True))


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
    for rank, world_size, sizes in ((0, 1, [4, 4, 4, 3]), (0, 2, [4]), (1, 2, [4])):
        spec = split_spec(tmp_path, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=True,
                          rank=rank, world_size=world_size, drop_last=world_size > 1, backend=backend)
        batches = _ids(spec)
        assert [len(b) for b in batches] == sizes
        assert len({i for b in batches for i in b}) == sum(sizes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_background_batches_match_and_count_only_the_time_the_consumer_waited(uneven, backend):
    spec = _spec(uneven, backend)
    expected = _ids(spec)[2:]
    eager = BackgroundBatches(lambda: _stream(spec, 0, 2, 1))
    try:
        started = time.perf_counter()
        got = [b[contract.ID_COLUMN] for b in eager]
        elapsed = time.perf_counter() - started
    finally:
        eager.close()
    assert got == expected
    # Taking every batch at once, the consumer does little but wait for the reader (its start-up included).
    assert 0.2 * elapsed <= eager.wait_seconds <= elapsed, (eager.wait_seconds, elapsed)

    slow = BackgroundBatches(lambda: _stream(spec, 0, 2, 1))
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


def test_a_manifest_without_a_file_list_is_refused(tmp_path):
    manifest = write_classification_dataset(tmp_path, UNEVEN)
    manifest.splits["train"].files = []  # what a schema-2 manifest holds
    with pytest.raises(ValueError, match="lists no files for split train.*preprocess --force"):
        split_spec(tmp_path, manifest, "train", batch_size=4, columns=COLUMNS, shuffle=False)


def test_reader_backend_is_a_config_key_defaulting_to_auto():
    tree = {"run_dir": "runs/x", "data": {"input": "in.jsonl", "label_column": "label"}, "tokenizer": {"path": "tok"}}
    assert build_config(tree).reader.backend == "auto"  # petastorm where installed (resolve_backend)
    assert build_config(tree, ["reader.backend=pyarrow"]).reader.backend == "pyarrow"
    with pytest.raises(ConfigError, match="config key reader.backend"):
        build_config(tree, ["reader.backend=arrow"])


def test_reader_backend_auto_is_petastorm_where_it_is_installed_else_pyarrow(monkeypatch):
    from pipeline.errors import ShardlineError
    from training import backends

    installed = importlib.util.find_spec("petastorm") is not None
    assert backends.resolve_backend("auto") == ("petastorm" if installed else "pyarrow")
    assert backends.resolve_backend("pyarrow") == "pyarrow"
    # As on the current stack, where Petastorm is not installed: auto falls back, petastorm is refused.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "petastorm" else real_find_spec(name, *a))
    assert backends.resolve_backend("auto") == "pyarrow"
    with pytest.raises(ShardlineError, match=r"^reader.backend: petastorm needs Petastorm.*SHARDLINE_STACK=petastorm"):
        backends.open_source("petastorm", [])
