"""The mixture: which source each position takes (every prefix within one sample of the weights),
and the loader over real Parquet sources (exactly once per pass, elastic resume, weight changes)."""
from __future__ import annotations

import contextlib
import dataclasses
import random

import numpy as np
import pytest

from pipeline import contract
from tests.unit.parquet_datasets import write_classification_dataset
from training import mixture
from training.mixture import MixSegment, MixtureLoader, Source, integer_shares, locate, quota_pattern

pytestmark = pytest.mark.unit
COLUMNS = (contract.ID_COLUMN, *(c for c in ("input_ids", "attention_mask", "label")))


def test_weights_become_exact_integer_counts_when_they_can():
    assert integer_shares((0.7, 0.2, 0.1)) == (7, 2, 1)
    assert integer_shares((3, 1)) == (3, 1)
    assert integer_shares((1 / 3, 1 / 3, 1 / 3)) == (1, 1, 1)
    counts = integer_shares((1 / 3, 1 / 7))  # no short exact period: apportioned over MAX_PERIOD
    assert sum(counts) == mixture.MAX_PERIOD and abs(counts[0] / mixture.MAX_PERIOD - 0.7) <= 1 / mixture.MAX_PERIOD


@pytest.mark.parametrize("seed", range(6))
def test_every_prefix_holds_each_share_within_one_sample(seed):
    rng = random.Random(seed)
    for _ in range(40):
        weights = tuple(rng.uniform(0.01, 1.0) for _ in range(rng.randint(2, 6)))
        counts = integer_shares(tuple(round(w, 3) for w in weights))
        pattern = quota_pattern(counts)
        period = pattern.period
        shares = np.asarray(counts) / period
        # Two periods: the second must repeat the first, and every prefix of both is within one sample.
        source, _ = pattern.locate(np.arange(2 * period))
        assert np.array_equal(source[:period], source[period:])
        taken = np.stack([np.cumsum(source == s) for s in range(len(counts))], axis=1)
        expected = np.arange(1, 2 * period + 1)[:, None] * shares[None, :]
        assert np.abs(taken - expected).max() < 1.0


def test_locate_agrees_with_walking_the_stream_across_segments():
    segments = (MixSegment(0, (0.5, 0.3, 0.2), (0, 0, 0)),)
    walked = [locate(segments, np.array([p]))[0][0] for p in range(40)]
    counts = [walked[:25].count(s) for s in range(3)]
    segments += (MixSegment(25, (0.1, 0.1, 0.8), tuple(counts)),)
    sources, indexes = locate(segments, np.arange(60))
    seen = [0, 0, 0]
    for source, index in zip(sources, indexes):  # each source's positions count up by one, across the change
        assert index == seen[source]
        seen[source] += 1
    assert list(sources[:25]) == walked[:25]
    assert list(mixture.taken_before(segments, 60)) == seen


def _sources(tmp_path, rows_per_source=(96, 40, 24), max_length=8, **overrides) -> list[Source]:
    sources = []
    for number, (rows, weight) in enumerate(zip(rows_per_source, (0.5, 0.3, 0.2))):
        directory = str(tmp_path / f"source{number}")
        groups = [[rows // 4] * 2, [rows - 2 * (rows // 4)]]
        manifest = write_classification_dataset(directory, groups, max_length=overrides.get(f"max_length{number}", max_length))
        sources.append(Source(f"s{number}", directory, manifest, weight))
    return sources


def _plan(sources, world_size=1, rank=0, batch_size=8, weights=None, on_exhausted="repeat", **options):
    plan = mixture.build_plan(sources, batch_size=batch_size, columns=COLUMNS, seed=3, rank=rank, world_size=world_size,
                              grad_accum_steps=1, num_workers=2, num_shuffle_row_groups=2, pin_memory=False,
                              backend="pyarrow", verify_checksums=True, on_exhausted=on_exhausted, **options)
    if weights:
        plan = dataclasses.replace(plan, segments=(MixSegment(0, weights, (0,) * len(sources)),))
    return plan


def _rows(batches) -> list[tuple[int, str]]:
    return [(int(s), i) for b in batches for s, i in zip(b[mixture.SOURCE_COLUMN], b[contract.ID_COLUMN])]


def test_two_epochs_read_each_source_once_per_pass_in_the_weights_shares(tmp_path):
    sources = _sources(tmp_path)
    with contextlib.closing(MixtureLoader(_plan(sources), num_prefetch=2, num_epochs=2)) as loader:
        rows = _rows(list(loader)) + _rows(list(loader))
    assert len(rows) == 2 * loader.num_batches * 8
    for s, source in enumerate(sources):
        ids = [i for k, i in rows if k == s]
        size = source.manifest.splits["train"].rows
        # Exactly once per pass: each whole pass is every row once, the partial last pass no row twice.
        for start in range(0, len(ids), size):
            chunk = ids[start:start + size]
            assert len(set(chunk)) == len(chunk)
            if len(chunk) == size:
                assert sorted(chunk) == sorted(f"doc-{n:06d}" for n in range(size))
        assert abs(len(ids) - source.weight * len(rows)) < 1
    assert list(loader.taken()) == [sum(1 for k, _ in rows if k == s) for s in range(3)]


@pytest.mark.parametrize("before, after", [((2, 8), (1, 16)), ((1, 16), (4, 4))])
def test_resume_on_another_process_count_continues_the_same_global_stream(tmp_path, before, after):
    sources = _sources(tmp_path)
    with contextlib.closing(MixtureLoader(_plan(sources, batch_size=16), num_epochs=2)) as whole:
        expected = _rows(list(whole)) + _rows(list(whole))

    def run(world, batch, state, steps):
        loaders = [MixtureLoader(_plan(sources, world, rank, batch), num_prefetch=2, num_epochs=2) for rank in range(world)]
        streams = []
        for loader in loaders:
            if state:
                loader.load_state_dict(state)
            streams.append(iter(loader))
        got = []
        for _ in range(steps):
            for stream in streams:
                got += _rows([next(stream)])
        state = loaders[0].state_dict()
        for loader in loaders:
            loader.close()
        return got, state

    first, state = run(*before, None, 5)
    rest, _ = run(*after, state, 5)  # the rest of epoch 0: 160 rows are 10 global batches of 16
    assert len(first) == len(rest) == 80 and first + rest == expected[:160]


def _columns(batches) -> list[tuple[int, str, list[int]]]:
    return [(int(s), i, ids.tolist()) for b in batches
            for s, i, ids in zip(b[mixture.SOURCE_COLUMN], b[contract.ID_COLUMN], b[contract.INPUT_IDS])]


@pytest.mark.parametrize("world_size", [1, 2])
def test_small_chunks_wrap_each_sources_ring_and_give_the_same_stream(tmp_path, monkeypatch, world_size):
    # Row groups of 24/24/48 rows and fewer: with 16-row chunks the windows of three passes go
    # round each source's ring of the arena several times.
    sources = _sources(tmp_path)
    with contextlib.closing(MixtureLoader(_plan(sources), num_prefetch=2, num_epochs=3)) as whole:
        expected = [_columns(list(whole)) for _ in range(3)]
    monkeypatch.setattr(mixture, "CHUNK_ROWS", 16)
    loaders = [MixtureLoader(_plan(sources, world_size, rank, 8 // world_size), num_prefetch=2, num_epochs=3)
               for rank in range(world_size)]
    for epoch in range(3):
        streams = [iter(loader) for loader in loaders]
        got = [row for batches in zip(*streams) for batch in batches for row in _columns([batch])]
        assert got == expected[epoch]
    rings = [mixture.ring_rows(spec, 16) for spec in loaders[0].plan.specs]
    assert all(taken > ring for taken, ring in zip(loaders[0].taken(), rings))  # each ring went round
    for loader in loaders:
        loader.close()


def test_a_weight_change_on_resume_is_a_new_segment_from_that_position(tmp_path):
    sources = _sources(tmp_path)
    loader = MixtureLoader(_plan(sources), num_prefetch=2, num_epochs=1)
    stream = iter(loader)
    first = _rows([next(stream) for _ in range(5)])
    state = loader.state_dict()
    loader.close()
    changed = MixtureLoader(_plan(sources, weights=(0.1, 0.1, 0.8)), num_prefetch=2, num_epochs=1)
    changed.load_state_dict(state)
    assert changed.changes and "0.8" in changed.changes[0]
    later = _rows(list(changed))
    changed.close()
    assert [s for s in changed.state_dict()["segments"]] == [
        {"start": 0, "weights": [0.5, 0.3, 0.2], "offsets": [0, 0, 0]},
        {"start": 40, "weights": [0.1, 0.1, 0.8], "offsets": [sum(1 for k, _ in first if k == s) for s in range(3)]},
    ]
    shares = [sum(1 for k, _ in later if k == s) / len(later) for s in range(3)]
    assert shares[2] == pytest.approx(0.8, abs=1 / len(later) + 1e-9)
    # Source 2 (24 rows) is read without replacement up to its pass end, then repeats.
    ids = [i for k, i in first + later if k == 2]
    assert len(set(ids[:24])) == 24 and ids[24:] and len(set(ids[24:48])) == len(ids[24:48])


def test_stop_ends_the_epoch_before_any_source_starts_a_second_pass(tmp_path):
    sources = _sources(tmp_path)
    plan = _plan(sources, on_exhausted="stop")
    with contextlib.closing(MixtureLoader(plan, num_prefetch=2, num_epochs=1)) as loader:
        rows = _rows(list(loader))
    for s, source in enumerate(sources):
        ids = [i for k, i in rows if k == s]
        assert len(ids) == len(set(ids)) <= source.manifest.splits["train"].rows
    # 24 rows at weight 0.2 run out after 120 positions: the epoch is the whole batches before that.
    assert plan.epoch_rows == 120 // 8 * 8


def test_sources_that_differ_cannot_be_mixed(tmp_path):
    sources = _sources(tmp_path, max_length1=12)
    with pytest.raises(mixture.MixtureError, match=r"s0 .* and s1 .* cannot be mixed: max_length 8 vs 12"):
        mixture.check_compatible(sources)


def test_the_mixture_config_says_what_is_wrong_in_one_line():
    from pipeline.config import ConfigError, build_config

    def config(**train):
        return build_config({"run_dir": "r", "data": {"label_column": "label"}, "tokenizer": {"path": "t"},
                             "train": train})

    web = {"name": "web", "path": "/d/web", "weight": 1}
    assert config(datasets=[web]).train.datasets[0].weight == 1
    with pytest.raises(ConfigError, match="set exactly one of path .* or input"):
        config(datasets=[{**web, "input": "/c/web.jsonl"}])
    with pytest.raises(ConfigError, match="distinct names"):
        config(datasets=[web, web])
    with pytest.raises(ConfigError, match="stop ends the run before any source starts a second pass"):
        config(datasets=[web], on_exhausted="stop", epochs=2)
    with pytest.raises(ConfigError, match="data.input.*is required"):
        config()
