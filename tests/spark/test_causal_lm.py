"""causal_lm end to end on the shared session: packed blocks, boundary columns, accounting."""
import json

import numpy as np
import pyarrow as pa
import pytest

from dataset_reads import split_table
from pipeline import contract, storage
from pipeline.config import build_config, save_config
from pipeline.demo import write_jsonl
from pipeline.tokenizer import load_tokenizer
from spark_jobs.preprocess import build_dataset

MAX_LENGTH = 24
# What the contract promises a causal_lm shard holds, in order (README, "The dataset contract").
CAUSAL_LM_TYPES = {"id": "string", "input_ids": "list<int32>", "attention_mask": "list<int8>",
                   "position_ids": "list<int32>", "segment_ids": "list<int32>", "num_tokens": "int32"}


@pytest.fixture(scope="module")
def packed(spark, tmp_path_factory, docstring_records):
    root = tmp_path_factory.mktemp("clm")
    # Short documents (a docstring's first words), so several fit in one block and some span two.
    texts = sorted({" ".join(r["text"].split()[:8]) for r in docstring_records[::9]})[:150]
    corpus = write_jsonl([{"text": t} for t in texts], root / "corpus.jsonl")
    with open(corpus, "a") as handle:  # known rejects and duplicates, so each manifest term is known
        handle.write(json.dumps({"text": texts[0]}) + "\n")  # exact duplicate
        handle.write(json.dumps({"text": "  " + texts[1].replace(" ", "\t ") + " "}) + "\n")  # same once cleaned
        handle.write('{"text": "no closing quote}\n')  # malformed_record
        handle.write(json.dumps({"text": ""}) + "\n")  # empty_text
        handle.write(json.dumps({"text": ["a", "list"]}) + "\n")  # wrong_type
    config = build_config({
        "run_dir": str(root / "run"),
        "data": {"input": str(corpus)},
        "tokenizer": {"train": {"kind": "bpe", "vocab_size": 400, "special_tokens": ["<pad>", "<unk>", "<s>", "</s>"]}},
        "preprocess": {"task": "causal_lm", "max_length": MAX_LENGTH, "seed": 1, "num_partitions": 2,
                       "shard": {"row_group_rows": 32}},
    })
    return config, build_dataset(spark, config), texts


def test_blocks_are_full_and_boundaries_are_marked(packed):
    config, manifest, texts = packed
    tokenizer = load_tokenizer(storage.join(config.dataset_dir, "tokenizer"))
    eos = tokenizer.convert_tokens_to_ids("</s>")
    assert manifest.task == "causal_lm" and manifest.eos_id == eos
    streams = {tuple(tokenizer(t, add_special_tokens=False)["input_ids"] + [eos]) for t in texts}
    real_tokens = padding = 0
    whole_documents = 0
    documents_in_blocks = 0
    for name in contract.SPLITS:
        table = split_table(config.dataset_dir, name)
        assert {f.name: f"list<{f.type.value_type}>" if pa.types.is_list(f.type) else str(f.type)
                for f in table.schema} == CAUSAL_LM_TYPES
        assert table.column_names == list(CAUSAL_LM_TYPES)
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
            padding += int((mask == 0).sum())
            # A block's segments are its documents, less the first when it continues one ("@N", N > 0).
            documents_in_blocks += int(seg.max()) - (0 if row[contract.ID_COLUMN].endswith("@0") else 1)
        for file in manifest.splits[name].files:  # row groups of row_group_rows blocks, but a task's last two
            groups = file.row_group_rows
            assert groups[:-2] == [32] * (len(groups) - 2) and max(groups) <= 32, file
            assert len(groups) == 1 or abs(groups[-1] - groups[-2]) <= 1, file
    assert whole_documents > 0
    assert real_tokens == sum(len(s) for s in streams) == manifest.token_count
    assert documents_in_blocks == len(texts) == sum(s.documents for s in manifest.splits.values())
    assert manifest.input_records == len(texts) + 5
    assert manifest.rejected_by_reason == {"malformed_record": 1, "empty_text": 1, "wrong_type": 1}
    assert manifest.duplicates_removed == 2
    assert padding == sum(s.padding_tokens for s in manifest.splits.values())
    # one padded (last) block per (partition, split) stream at most
    assert 0 < padding < 2 * 3 * MAX_LENGTH


@pytest.mark.e2e  # spark-submit in its own JVM
def test_a_fresh_run_dir_on_local_1_builds_the_same_bpe_dataset(packed, submit_preprocess, contents_of, tmp_path):
    # The byte-level BPE tokenizer is trained again in another JVM and Python process.
    config, _, _ = packed
    single = build_config({**config.to_dict(), "run_dir": str(tmp_path / "single")})
    save_config(single, str(tmp_path / "single.yaml"))
    submit_preprocess(tmp_path / "single.yaml", "local[1]", driver_options=True)
    first = contents_of(config.dataset_dir)
    assert first["shards"] and first["rejects"] and first["tokenizer"]
    assert contents_of(single.dataset_dir) == first
