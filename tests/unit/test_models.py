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
