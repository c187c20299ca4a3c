"""Model builders. Every model maps (input_ids, attention_mask) to class logits, and saves itself
into a directory that `load_model` reads back without the training config."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from pipeline import contract
from pipeline.config import TrainConfig

MLP_CONFIG_FILE = "shardline_mlp.json"
MLP_WEIGHTS_FILE = "model.safetensors"


class MeanEmbeddingClassifier(nn.Module):
    """The seeds' small feed-forward classifier: mean of token embeddings -> hidden -> classes."""

    def __init__(self, vocab_size: int, embedding_dim: int, hidden_size: int, num_labels: int, pad_id: int):
        super().__init__()
        self.hparams = dict(
            vocab_size=vocab_size, embedding_dim=embedding_dim, hidden_size=hidden_size,
            num_labels=num_labels, pad_id=pad_id,
        )
        self.embedding = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_id)
        self.classifier = nn.Sequential(nn.Linear(embedding_dim, hidden_size), nn.ReLU(), nn.Linear(hidden_size, num_labels))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        summed = (self.embedding(input_ids) * mask).sum(dim=1)
        mean = summed / mask.sum(dim=1).clamp(min=1.0)
        return self.classifier(mean)

    def save(self, directory: Path) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(directory / MLP_WEIGHTS_FILE))
        (directory / MLP_CONFIG_FILE).write_text(json.dumps({"model": "mlp", **self.hparams}, indent=2))


class HFSequenceClassifier(nn.Module):
    """A transformers sequence classifier behind the same (input_ids, attention_mask) -> logits call."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf_model = hf_model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hf_model(input_ids=input_ids, attention_mask=attention_mask).logits

    def save(self, directory: Path) -> None:
        self.hf_model.save_pretrained(str(directory))


def build_model(cfg: TrainConfig, manifest: contract.Manifest) -> nn.Module:
    if cfg.model == "mlp":
        return MeanEmbeddingClassifier(
            manifest.vocab_size, cfg.embedding_dim, cfg.hidden_size, manifest.num_labels, manifest.pad_id
        )
    from transformers import BertConfig, BertForSequenceClassification

    id2label = {index: name for name, index in manifest.label_map.items()}
    if cfg.pretrained:
        if not Path(cfg.pretrained).is_dir():
            raise FileNotFoundError(f"train.pretrained {cfg.pretrained} is not a local model directory")
        hf_model = BertForSequenceClassification.from_pretrained(
            cfg.pretrained, num_labels=manifest.num_labels, id2label=id2label,
            label2id=manifest.label_map, ignore_mismatched_sizes=True,
        )
        if hf_model.config.vocab_size < manifest.vocab_size:
            raise ValueError(
                f"train.pretrained has {hf_model.config.vocab_size} embeddings but the dataset's tokenizer "
                f"has {manifest.vocab_size} tokens: preprocess with the model's own tokenizer (tokenizer.path)"
            )
    else:
        settings = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
        settings.update(cfg.model_config_)
        bert_config = BertConfig(
            vocab_size=manifest.vocab_size, pad_token_id=manifest.pad_id, num_labels=manifest.num_labels,
            max_position_embeddings=max(512, manifest.max_length), id2label=id2label,
            label2id=manifest.label_map, **settings,
        )
        hf_model = BertForSequenceClassification(bert_config)
    return HFSequenceClassifier(hf_model)


def load_model(directory: str | Path) -> nn.Module:
    directory = Path(directory)
    if (directory / MLP_CONFIG_FILE).exists():
        from safetensors.torch import load_file

        hparams = json.loads((directory / MLP_CONFIG_FILE).read_text())
        hparams.pop("model")
        model = MeanEmbeddingClassifier(**hparams)
        model.load_state_dict(load_file(str(directory / MLP_WEIGHTS_FILE)))
        return model
    from transformers import AutoModelForSequenceClassification

    return HFSequenceClassifier(AutoModelForSequenceClassification.from_pretrained(str(directory)))
