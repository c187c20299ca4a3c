"""causal_lm end to end on the shared session: packed blocks, boundary columns, accounting."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import contract, storage
from pipeline.config import build_config
from pipeline.demo import write_jsonl
from pipeline.tokenizer import load_tokenizer
from spark_jobs.preprocess import build_dataset

MAX_LENGTH = 24


@pytest.fixture(scope="module")
def packed(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("clm")
    # Short documents (a docstring's first words), so several fit in one block and some span two.
    texts = sorted({" ".join(r["text"].split()[:8]) for r in docstring_records[::9]})[:150]
    corpus = write_jsonl([{"text": t} for t in texts], root / "corpus.jsonl")
    config = build_config({
        "run_dir": str(root / "run"),
        "data": {"input": str(corpus)},
        "tokenizer": {"train": {"kind": "bpe", "vocab_size": 400, "special_tokens": ["<pad>", "<unk>", "<s>", "</s>"]}},
        "preprocess": {"task": "causal_lm", "max_length": MAX_LENGTH, "seed": 1, "num_partitions": 2,
                       "shard": {"row_group_rows": 32, "divisible_by": 4}},
    })
    return config, build_dataset(spark, config), texts


def test_blocks_are_full_and_boundaries_are_marked(packed):
    config, manifest, texts = packed
    tokenizer = load_tokenizer(storage.join(config.dataset_dir, "tokenizer"))
    eos = tokenizer.convert_tokens_to_ids("</s>")
    assert manifest.task == "causal_lm" and manifest.eos_id == eos
    streams = {tuple(tokenizer(t, add_special_tokens=False)["input_ids"] + [eos]) for t in texts}
    real_tokens = 0
    whole_documents = 0
    for name in contract.SPLITS:
        table = pa.concat_tables([pq.read_table(p) for p in manifest.split_files(config.dataset_dir, name)])
        assert table.column_names == [contract.ID_COLUMN, contract.INPUT_IDS, contract.ATTENTION_MASK,
                                      contract.POSITION_IDS, contract.SEGMENT_IDS, contract.NUM_TOKENS]
        for row in table.to_pylist():
            ids, seg, pos, mask = (np.array(row[c]) for c in (contract.INPUT_IDS, contract.SEGMENT_IDS,
                                                              contract.POSITION_IDS, contract.ATTENTION_MASK))
            assert len(ids) == len(seg) == len(pos) == len(mask) == MAX_LENGTH
            assert (mask == (seg > 0)).all() and row[contract.NUM_TOKENS] == mask.sum()
            real = seg > 0
            assert real[0] and (np.diff(real.astype(int)) <= 0).all()  # padding only at the end
            assert (ids[~real] == manifest.pad_id).all()
            assert seg[0] == 1 and (np.diff(seg[real]) >= 0).all() and (np.diff(seg[real]) <= 1).all()
            for s in range(1, seg.max() + 1):
                piece = ids[seg == s]
                assert (pos[seg == s] == np.arange(len(piece))).all()  # restarts at 0 per segment
                if s > 1 and piece[-1] == eos:  # starts and ends inside the block: a whole document
                    assert tuple(piece) in streams
                    whole_documents += 1
            real_tokens += int(mask.sum())
        assert manifest.splits[name].num_row_groups % 4 == 0
    assert whole_documents > 0
    assert real_tokens == sum(len(s) for s in streams) == manifest.token_count
    documents = sum(s.documents for s in manifest.splits.values())
    assert documents == len(texts)
    assert manifest.input_records == documents + manifest.rejected_records + manifest.duplicates_removed
    padding = sum(s.padding_tokens for s in manifest.splits.values())
    # one padded (last) block per (partition, split) stream at most
    assert 0 < padding < 3 * 3 * MAX_LENGTH
