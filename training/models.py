"""Model builders. Classifiers map (input_ids, attention_mask) to class logits; the causal LM maps a
packed block (input_ids, attention_mask, position_ids, segment_ids) to next-token logits. Each saves
itself into a directory that `load_model` reads back without the training config. Nothing here
knows about devices, precision or data parallelism."""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import nn

from pipeline import contract, storage
from pipeline.config import BERT_DEFAULTS, GPT2_DEFAULTS, MODEL_TASKS, ShardlineConfig, TrainConfig, resolve_local_path
from pipeline.errors import MissingPathError, ShardlineError

MLP_CONFIG_FILE = "shardline_mlp.json"
MLP_WEIGHTS_FILE = "model.safetensors"


class DatasetMismatchError(ShardlineError, ValueError):
    """The dataset cannot feed this config and model (task, lengths, vocabulary, labels)."""


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
        self.num_labels, self.max_positions = num_labels, None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        summed = (self.embedding(input_ids) * mask).sum(dim=1)
        mean = summed / mask.sum(dim=1).clamp(min=1.0)
        return self.classifier(mean)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embedding

    def save(self, directory: str) -> None:
        """Into a local directory (train.py stages it, then puts it at model_dir)."""
        from safetensors.torch import save_file

        os.makedirs(directory, exist_ok=True)
        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()},
                  os.path.join(directory, MLP_WEIGHTS_FILE))
        with open(os.path.join(directory, MLP_CONFIG_FILE), "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"model": "mlp", **self.hparams}, indent=2))


class HFSequenceClassifier(nn.Module):
    """A transformers sequence classifier behind the same (input_ids, attention_mask) -> logits call."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf_model = hf_model
        self.num_labels = hf_model.config.num_labels
        self.max_positions = hf_model.config.max_position_embeddings

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.hf_model(input_ids=input_ids, attention_mask=attention_mask).logits

    def get_input_embeddings(self) -> nn.Embedding:
        return self.hf_model.get_input_embeddings()

    def save(self, directory: str) -> None:
        self.hf_model.save_pretrained(str(directory))


def document_causal_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """(batch, 1, T, T) bool, True where query i may attend key j: same document and j <= i.
    Padding (segment 0) attends only to padding, so no row is empty (an empty row is NaN in SDPA)."""
    same_document = segment_ids.unsqueeze(-1) == segment_ids.unsqueeze(-2)
    length = segment_ids.shape[-1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    return (same_document & causal).unsqueeze(1)


class PackedCausalLM(nn.Module):
    """GPT-2 over packed blocks: attention stays inside each document and positions restart per
    document, so a block of several documents trains exactly like the documents one by one."""

    def __init__(self, hf_model: nn.Module):
        super().__init__()
        self.hf_model = hf_model
        self.num_labels, self.max_positions = None, hf_model.config.n_positions

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                segment_ids: torch.Tensor) -> torch.Tensor:
        # attention_mask is implied by segment_ids (0 = padding); a 4D mask is used by GPT-2 as given.
        mask = document_causal_mask(segment_ids)
        return self.hf_model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).logits

    def get_input_embeddings(self) -> nn.Embedding:
        return self.hf_model.get_input_embeddings()

    def save(self, directory: str) -> None:
        self.hf_model.save_pretrained(str(directory))


def causal_targets(input_ids: torch.Tensor, position_ids: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """Next-token targets aligned with the logits of positions 0..T-2: no loss on padding, and none
    for a document's first token (predicting it would cross from the previous document)."""
    targets = input_ids.masked_fill((segment_ids == 0) | (position_ids == 0), -100)
    return targets[:, 1:]


def build_model(cfg: TrainConfig, manifest: contract.Manifest) -> nn.Module:
    if cfg.model == "mlp":
        return MeanEmbeddingClassifier(
            manifest.vocab_size, cfg.embedding_dim, cfg.hidden_size, manifest.num_labels, manifest.pad_id
        )
    if cfg.model == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        if cfg.pretrained:
            return PackedCausalLM(GPT2LMHeadModel.from_pretrained(_local_dir(cfg.pretrained), attn_implementation="sdpa"))
        settings = {**GPT2_DEFAULTS, **cfg.model_config_}
        eos_id = manifest.eos_id if manifest.eos_id is not None else manifest.pad_id  # version-1 manifests had none
        gpt_config = GPT2Config(
            vocab_size=manifest.vocab_size, n_positions=max(manifest.max_length, settings.pop("n_positions", 0)),
            # GPT-2's convention: one end-of-text token starts and ends documents; the packer ends each with it.
            bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=manifest.pad_id, **settings,
        )
        gpt_config._attn_implementation = "sdpa"
        return PackedCausalLM(GPT2LMHeadModel(gpt_config))
    from transformers import BertConfig, BertForSequenceClassification

    id2label = {index: name for name, index in manifest.label_map.items()}
    if cfg.pretrained:
        hf_model = BertForSequenceClassification.from_pretrained(
            _local_dir(cfg.pretrained), num_labels=manifest.num_labels, id2label=id2label,
            label2id=manifest.label_map, ignore_mismatched_sizes=True,
        )
    else:
        settings = {**BERT_DEFAULTS, **cfg.model_config_}
        bert_config = BertConfig(
            vocab_size=manifest.vocab_size, pad_token_id=manifest.pad_id, num_labels=manifest.num_labels,
            max_position_embeddings=max(512, manifest.max_length), id2label=id2label,
            label2id=manifest.label_map, **settings,
        )
        hf_model = BertForSequenceClassification(bert_config)
    return HFSequenceClassifier(hf_model)


def _local_dir(path: str) -> str:
    path = resolve_local_path(path)
    if not os.path.isdir(path):
        raise MissingPathError(f"train.pretrained {path} is not a local model directory")
    return path


def check_dataset_matches(model: nn.Module, manifest: contract.Manifest, config: ShardlineConfig) -> None:
    """Fail before step 1, in one sentence, when the dataset cannot feed this config and model."""
    where = config.dataset_dir
    problems = []
    if manifest.schema_version not in contract.READABLE_SCHEMA_VERSIONS:
        readable = " or ".join(map(str, contract.READABLE_SCHEMA_VERSIONS))
        problems.append(f"{where} has schema version {manifest.schema_version} but this trainer reads "
                        f"{readable}; rebuild it with `shardline preprocess --force`")
    if manifest.task != config.preprocess.task:
        problems.append(f"{where} was built for task {manifest.task} but preprocess.task is {config.preprocess.task}")
    if MODEL_TASKS[config.train.model] != manifest.task:
        problems.append(f"train.model {config.train.model} trains {MODEL_TASKS[config.train.model]} but {where} "
                        f"holds {manifest.task} rows; pick a {manifest.task} model or rebuild the dataset")
    if manifest.max_length != config.preprocess.max_length:
        problems.append(f"{where} has rows of {manifest.max_length} tokens but preprocess.max_length is "
                        f"{config.preprocess.max_length}; rebuild it or fix the config")
    embeddings = model.get_input_embeddings().num_embeddings
    if embeddings < manifest.vocab_size:
        problems.append(f"the model has {embeddings} token embeddings but the dataset's tokenizer has "
                        f"{manifest.vocab_size} tokens; preprocess with the model's own tokenizer (tokenizer.path)")
    if model.num_labels is not None and model.num_labels != manifest.num_labels:
        problems.append(f"the model predicts {model.num_labels} classes but {where} has {manifest.num_labels} labels")
    if model.max_positions is not None and model.max_positions < manifest.max_length:
        problems.append(f"the model takes at most {model.max_positions} positions but {where} rows have "
                        f"{manifest.max_length} tokens; lower preprocess.max_length")
    if manifest.splits.get("train") is None or manifest.splits["train"].rows == 0:
        problems.append(f"{where} has no training rows; add documents to data.input")
    if problems:
        raise DatasetMismatchError(problems[0] + (f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""))


class NotAModelDirError(ShardlineError):
    """A directory that holds no model shardline (or transformers) can load."""


def model_kind(directory: str | Path) -> str:
    """`mlp`, `bert` or `gpt2`, from the files of a saved model directory; a one-line error otherwise."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MissingPathError(f"model directory {directory} does not exist; `shardline train` writes one to run_dir/model")
    if (directory / MLP_CONFIG_FILE).exists():
        return "mlp"
    try:
        model_type = json.loads((directory / "config.json").read_text()).get("model_type")
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        model_type = None
    if model_type not in ("bert", "gpt2"):
        found = f"a {model_type} model" if model_type else f"no {MLP_CONFIG_FILE} and no transformers config.json"
        raise NotAModelDirError(f"{directory} is not a shardline model directory ({found}); "
                                "point at run_dir/model of a finished `shardline train`")
    return model_type


def load_model(uri: str) -> nn.Module:
    """A model directory as train wrote it, from local disk or any storage URI (copied locally
    first), behind the call signature of its task (see the classes above)."""
    if not storage.is_local(str(uri)) and not storage.exists(str(uri)):
        raise MissingPathError(f"model directory {uri} does not exist; `shardline train` writes one to run_dir/model")
    with storage.local_dir_for(str(uri)) as directory:
        return _load_local_model(directory)


def _load_local_model(directory: str) -> nn.Module:
    kind = model_kind(directory)
    if kind == "mlp":
        from safetensors.torch import load_file

        with open(os.path.join(directory, MLP_CONFIG_FILE), encoding="utf-8") as handle:
            hparams = json.load(handle)
        hparams.pop("model")
        model = MeanEmbeddingClassifier(**hparams)
        model.load_state_dict(load_file(os.path.join(directory, MLP_WEIGHTS_FILE)))
        return model
    if kind == "gpt2":
        from transformers import GPT2LMHeadModel

        return PackedCausalLM(GPT2LMHeadModel.from_pretrained(directory, attn_implementation="sdpa"))
    from transformers import AutoModelForSequenceClassification

    return HFSequenceClassifier(AutoModelForSequenceClassification.from_pretrained(directory))
