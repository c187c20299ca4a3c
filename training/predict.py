"""Predictions from a trained model directory: labels with probabilities, or text continuations.

    shardline predict --model runs/demo/model "Create a new event loop." [--json]
    python -c 'from training.predict import predict; print(predict("runs/demo/model", ["Create a new event loop."]))'

A text is cleaned the way the Spark job cleaned the training documents (the Unicode form and
whitespace rule recorded in the model's lineage.json), then encoded with the tokenizer saved beside
the model, truncated to the length the model was trained on. Classifiers (mlp, bert) give every
label's probability; gpt2 continues the text greedily for `max_new_tokens` tokens or until its
end-of-text token.
"""
from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training.artifacts import LABEL_MAP_FILE, LINEAGE_FILE
from training.models import load_model, model_kind

DEFAULT_MAX_NEW_TOKENS = 20


def clean_text(text: str, normalization: str, collapse_whitespace: bool) -> str:
    """What spark_jobs/clean.normalize_text does to a document before it is tokenized."""
    if normalization != "none":
        text = unicodedata.normalize(normalization, text)
    return " ".join(text.split()) if collapse_whitespace else text


@dataclass
class Predictor:
    """A loaded model directory; call it on texts."""

    kind: str  # mlp, bert or gpt2
    model: nn.Module
    tokenizer: Any
    labels: list[str]  # class id -> label name (classifiers)
    max_length: int
    normalization: str
    collapse_whitespace: bool
    device: torch.device

    @classmethod
    def load(cls, model_dir: str | Path, device: str = "auto") -> "Predictor":
        """model_dir (or a run_dir holding model/), local or on any store (copied to a temporary directory)."""
        from pipeline import storage

        with storage.local_dir_for(find_model_dir(model_dir)) as local:
            return cls._load_local(Path(local), device)

    @classmethod
    def _load_local(cls, model_dir: Path, device: str) -> "Predictor":
        from pipeline.tokenizer import load_tokenizer
        from training.distributed import pick_device

        kind = model_kind(model_dir)
        lineage = _read_json(model_dir / LINEAGE_FILE) or {}
        preprocess = lineage.get("config", {}).get("preprocess", {})
        tokenizer = load_tokenizer(model_dir)
        label_map = _read_json(model_dir / LABEL_MAP_FILE) or {}
        torch_device = pick_device(device)
        model = load_model(model_dir).to(torch_device).eval()
        return cls(
            kind=kind, model=model, tokenizer=tokenizer,
            labels=[name for name, _ in sorted(label_map.items(), key=lambda item: item[1])],
            max_length=preprocess.get("max_length") or tokenizer.model_max_length,
            normalization=preprocess.get("normalization", "NFKC"),
            collapse_whitespace=preprocess.get("collapse_whitespace", True),
            device=torch_device,
        )

    def __call__(self, texts: Iterable[str], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                 batch_size: int = 64) -> list[dict[str, Any]]:
        texts = list(texts)
        if self.kind == "gpt2":
            return [self.continue_text(text, max_new_tokens) for text in texts]
        return [row for start in range(0, len(texts), batch_size) for row in self.classify(texts[start:start + batch_size])]

    def _clean(self, text: str) -> str:
        return clean_text(text, self.normalization, self.collapse_whitespace)

    @torch.no_grad()
    def classify(self, texts: list[str]) -> list[dict[str, Any]]:
        """{"text", "label", "score", "scores": {label: probability}} per text, labels by probability."""
        if not texts:
            return []
        encoded = self.tokenizer([self._clean(t) for t in texts], truncation=True, max_length=self.max_length,
                                 padding=True, return_tensors="pt")
        logits = self.model(input_ids=encoded["input_ids"].to(self.device),
                            attention_mask=encoded["attention_mask"].to(self.device))
        probabilities = torch.softmax(logits.float(), dim=-1).cpu()
        names = self.labels if len(self.labels) == probabilities.shape[1] else [str(i) for i in range(probabilities.shape[1])]
        results = []
        for text, row in zip(texts, probabilities.tolist()):
            scores = dict(sorted(zip(names, row), key=lambda item: -item[1]))
            label = next(iter(scores))
            results.append({"text": text, "label": label, "score": scores[label], "scores": scores})
        return results

    @torch.no_grad()
    def continue_text(self, text: str, max_new_tokens: int) -> dict[str, Any]:
        """{"text", "generated_text" (the text and its continuation, decoded), "continuation"}."""
        hf_model = self.model.hf_model  # the GPT2LMHeadModel inside the packed-block wrapper
        # Training documents were tokenized without special tokens: so is the prompt.
        prompt = self.tokenizer(self._clean(text), add_special_tokens=False, return_tensors="pt")
        room = max(1, hf_model.config.n_positions - max_new_tokens)  # keep the prompt's end when it is too long
        prompt_ids = prompt["input_ids"][:, -room:].to(self.device)
        generated = hf_model.generate(
            input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids), max_new_tokens=max_new_tokens,
            do_sample=False, pad_token_id=self.tokenizer.pad_token_id,
        )[0].cpu()
        prompt_text = self.tokenizer.decode(prompt_ids[0], skip_special_tokens=True)
        full_text = self.tokenizer.decode(generated, skip_special_tokens=True)
        continuation = full_text[len(prompt_text):] if full_text.startswith(prompt_text) else \
            self.tokenizer.decode(generated[prompt_ids.shape[1]:], skip_special_tokens=True)
        return {"text": text, "generated_text": full_text, "continuation": continuation.strip()}


def predict(model_dir: str | Path, texts: Iterable[str], max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
            device: str = "auto") -> list[dict[str, Any]]:
    """Load model_dir (or run_dir/model) and predict for each text, in one call."""
    return Predictor.load(model_dir, device)(texts, max_new_tokens=max_new_tokens)


def find_model_dir(path: str | Path) -> str:
    """path itself, or path/model when path is a run_dir (local or a URI)."""
    from pipeline import storage

    path = str(path)
    if not storage.exists(storage.join(path, LINEAGE_FILE)) and storage.exists(storage.join(path, "model", LINEAGE_FILE)):
        return storage.join(path, "model")
    return path


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def format_prediction(result: dict[str, Any], label_width: int = 0) -> str:
    """One line a person reads: `label  0.912  the text`, or the text and its continuation."""
    if "label" in result:
        return f"{result['label']:<{label_width}}  {result['score']:.3f}  {result['text']}"
    return result["generated_text"]
