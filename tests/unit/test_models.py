import pytest
import torch

from pipeline import contract
from pipeline.config import TrainConfig
from training.models import MeanEmbeddingClassifier, build_model, load_model


def _manifest(**overrides):
    fields = dict(
        schema_version=contract.SCHEMA_VERSION, task="classification", max_length=8, vocab_size=50, pad_id=0,
        tokenizer_sha256="0" * 64, label_map={"a": 0, "b": 1, "c": 2}, input_records=0, rejected_records=0,
        rejected_by_reason={}, token_count=0, splits={}, config={},
    )
    fields.update(overrides)
    return contract.Manifest(**fields)


def test_mlp_ignores_padding_positions():
    torch.manual_seed(0)
    model = MeanEmbeddingClassifier(vocab_size=50, embedding_dim=8, hidden_size=16, num_labels=3, pad_id=0)
    short = model(torch.tensor([[5, 6, 0, 0]]), torch.tensor([[1, 1, 0, 0]]))
    # Same real tokens, different garbage in masked positions: same logits.
    garbage = model(torch.tensor([[5, 6, 9, 9]]), torch.tensor([[1, 1, 0, 0]]))
    assert torch.allclose(short, garbage)
    assert short.shape == (1, 3)


def test_mlp_saves_and_loads_identically(tmp_path):
    model = build_model(TrainConfig(model="mlp", embedding_dim=8, hidden_size=16), _manifest())
    model.save(tmp_path)
    reloaded = load_model(tmp_path)
    ids, mask = torch.tensor([[3, 4, 5, 0]]), torch.tensor([[1, 1, 1, 0]])
    assert torch.equal(model(ids, mask), reloaded(ids, mask))


def test_bert_from_config_matches_dataset_shape(tmp_path):
    cfg = TrainConfig(model="bert", model_config={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64})
    model = build_model(cfg, _manifest())
    logits = model(torch.tensor([[2, 7, 8, 3, 0, 0, 0, 0]]), torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0]]))
    assert logits.shape == (1, 3)
    model.save(tmp_path)
    assert torch.allclose(load_model(tmp_path).eval()(torch.tensor([[2, 7]]), torch.tensor([[1, 1]])),
                          model.eval()(torch.tensor([[2, 7]]), torch.tensor([[1, 1]])))


def _tiny_gpt2(n_positions=16):
    from transformers import GPT2Config, GPT2LMHeadModel

    from training.models import PackedCausalLM

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=40, n_positions=n_positions, n_embd=32, n_layer=2, n_head=2)
    config._attn_implementation = "sdpa"
    return PackedCausalLM(GPT2LMHeadModel(config)).eval()


def test_gpt2_on_a_packed_block_equals_each_document_alone():
    model = _tiny_gpt2()
    first, second = [5, 6, 7], [20, 21, 22, 23]
    packed = model(
        torch.tensor([first + second + [0, 0, 0]]), torch.tensor([[1] * 7 + [0] * 3]),
        torch.tensor([[0, 1, 2, 0, 1, 2, 3, 0, 0, 0]]), torch.tensor([[1, 1, 1, 2, 2, 2, 2, 0, 0, 0]]),
    )
    for document, start in ((first, 0), (second, 3)):
        n = len(document)
        alone = model(torch.tensor([document]), torch.ones(1, n, dtype=torch.long),
                      torch.arange(n).unsqueeze(0), torch.ones(1, n, dtype=torch.long))
        assert torch.allclose(packed[0, start:start + n], alone[0], atol=1e-5)
    assert torch.isfinite(packed).all()  # padding rows are not empty attention rows


def test_causal_targets_skip_padding_and_document_starts():
    from training.models import causal_targets

    ids = torch.tensor([[5, 6, 7, 20, 21, 0, 0]])
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 0]])
    segments = torch.tensor([[1, 1, 1, 2, 2, 0, 0]])
    # target t is the token after position t: 6, 7, (20 starts document 2: none), 21, (padding: none)
    assert causal_targets(ids, positions, segments).tolist() == [[6, 7, -100, 21, -100, -100]]


def _config(**train):
    from pipeline.config import build_config

    return build_config({"run_dir": "/tmp/x", "data": {"input": "x", "label_column": "label"}, "tokenizer": {"path": "x"},
                         "preprocess": {"task": "classification", "max_length": 8}, "train": train})


@pytest.mark.parametrize("manifest_changes, train, message", [
    ({"schema_version": contract.SCHEMA_VERSION + 1}, {}, "has schema version"),
    ({"task": "causal_lm"}, {}, "was built for task causal_lm but preprocess.task is classification"),
    ({"max_length": 16}, {}, "has rows of 16 tokens but preprocess.max_length is 8"),
    ({"vocab_size": 80}, {}, "the model has 50 token embeddings but the dataset's tokenizer has 80 tokens"),
    ({"label_map": {"a": 0, "b": 1}}, {}, "the model predicts 3 classes but /tmp/x/dataset has 2 labels"),
])
def test_contract_check_names_the_mismatch(manifest_changes, train, message):
    from training.models import check_dataset_matches

    model = build_model(TrainConfig(model="mlp", embedding_dim=4, hidden_size=4), _manifest())
    splits = {"train": contract.SplitStats(rows=4, tokens=8, num_files=1, num_row_groups=1, row_group_rows=[4])}
    with pytest.raises(ValueError, match=message):
        check_dataset_matches(model, _manifest(splits=splits, **manifest_changes), _config(**train))


@pytest.mark.parametrize("schema_version", [3, 2])
def test_a_schema_3_dataset_still_trains_and_an_older_one_is_refused(tmp_path, schema_version):
    # Schema 4 only dropped a row-group layout the reader does not use: a dataset built before it
    # needs no rebuild. Schema 2 had no file list, which the reader needs.
    from parquet_datasets import write_classification_dataset, write_tokenizer
    from pipeline.config import build_config
    from training.models import DatasetMismatchError
    from training.train import train

    manifest = write_classification_dataset(str(tmp_path / "dataset"), [[16], [16]])
    older = manifest.model_copy(update={"schema_version": schema_version})
    contract.write_json_atomic(str(tmp_path / "dataset" / contract.MANIFEST_FILE), older.model_dump(mode="json"))
    write_tokenizer(str(tmp_path / "tokenizer"))
    config = build_config({"run_dir": str(tmp_path), "data": {"input": "unused", "label_column": "label"},
                           "tokenizer": {"path": "unused"}, "preprocess": {"max_length": 8},
                           "reader": {"backend": "pyarrow"},
                           "train": {"model": "mlp", "batch_size": 8, "embedding_dim": 4, "hidden_size": 4}})
    if schema_version == 3:
        train(config)
        assert (tmp_path / "model" / "model.safetensors").exists()
    else:
        with pytest.raises(DatasetMismatchError, match="has schema version 2 but this trainer reads 3 or 4"):
            train(config)


def test_contract_check_refuses_a_classifier_on_causal_blocks():
    from pipeline.config import build_config
    from training.models import check_dataset_matches

    # The config itself cannot pair mlp with causal_lm (refused at load time); a dataset can still disagree.
    config = build_config({"run_dir": "/tmp/x", "data": {"input": "x", "label_column": "label"}, "tokenizer": {"path": "x"},
                           "preprocess": {"task": "classification", "max_length": 8}, "train": {"model": "mlp"}})
    model = build_model(config.train, _manifest())
    splits = {"train": contract.SplitStats(rows=4, tokens=8, num_files=1, num_row_groups=1, row_group_rows=[4])}
    with pytest.raises(ValueError, match=r"built for task causal_lm but preprocess.task is classification \(and 1 more"):
        check_dataset_matches(model, _manifest(task="causal_lm", splits=splits), config)
