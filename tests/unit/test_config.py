import importlib.util
from pathlib import Path

import pytest

from pipeline.config import ConfigError, build_config, load_config, parse_override, save_config

REPO_ROOT = Path(__file__).resolve().parents[2]
MINIMAL = {"run_dir": "runs/x", "data": {"input": "corpus.jsonl", "label_column": "label"}, "tokenizer": {"train": {}}}


def test_overrides_win_over_file_values_and_parse_as_yaml():
    config = build_config(
        {**MINIMAL, "train": {"lr": 0.1}},
        ["train.lr=3e-4", "train.optimizer=sgd", "preprocess.max_length=64", "train.max_steps=null"],
    )
    assert config.train.lr == pytest.approx(3e-4)
    assert config.train.optimizer == "sgd"
    assert config.preprocess.max_length == 64
    assert config.train.max_steps is None


def test_spark_conf_override_keeps_dotted_key_whole():
    config = build_config(MINIMAL, ["spark.conf.spark.sql.shuffle.partitions=8", "spark.conf.spark.ui.enabled=false"])
    assert config.spark.conf == {"spark.sql.shuffle.partitions": "8", "spark.ui.enabled": "false"}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.lrr=1"], "config key train.lrr: unknown key"),
        (["train.lr=fast"], "config key train.lr: Input should be a valid number"),
        (["train.optimizer=lbfgs"], "config key train.optimizer: Input should be"),
        (["preprocess.split.train=0.5"], "config key preprocess.split: train + val + test must sum to 1"),
        (["data.format=xml"], "config key data.format"),
        (["tokenizer.path=tok.json"], "config key tokenizer: set exactly one of"),
        (["preprocess.stride=127"], "config key preprocess.stride: 127 must be below max_length - 2 (126)"),
        (["preprocess.quality.gopher_repetition.top_n_grams={2: -0.1}"],
         "config key preprocess.quality.gopher_repetition.top_n_grams.2: Input should be greater than or equal to 0"),
        (["preprocess.quality.gopher_repetition.dup_n_grams={0: 0.1}"],
         "config key preprocess.quality.gopher_repetition.dup_n_grams.0.[key]: Input should be greater than or equal to 1"),
    ],
)
def test_bad_values_name_the_key_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as raised:
        build_config(MINIMAL, overrides)
    assert str(raised.value).startswith(message)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        # Each of these used to pass validation and fail later: in the Spark job or at train time.
        (["tokenizer.train.kind=bpe", "tokenizer.train.special_tokens=[<pad>, <s>]"],
         "config key tokenizer.train.special_tokens: a bpe tokenizer needs the special tokens ['<unk>', '</s>']"),
        (["data.label_column=null"], "config key data.label_column: required when preprocess.task is classification"),
        (["preprocess.task=causal_lm", "train.model=bert"], "config key train.model: bert trains classification, "
                                                            "but preprocess.task is causal_lm; use train.model: gpt2"),
        (["train.model=gpt2"], "config key train.model: gpt2 trains causal_lm, but preprocess.task is classification"),
        (["train.pretrained=/models/bert"], "config key train.pretrained: only bert and gpt2 load pretrained weights"),
        (["train.model_config={n_layer: 2}"], "config key train.model_config: holds bert/gpt2 settings, and train.model is mlp"),
        (["train.model=bert", "train.model_config={hidden_size: 100, num_attention_heads: 3}"],
         "config key train.model_config: hidden_size 100 must be a multiple of num_attention_heads 3"),
        (["train.model=bert", "train.model_config={max_position_embeddings: 64}"],
         "config key train.model_config: max_position_embeddings 64 is below preprocess.max_length 128"),
    ],
)
def test_combinations_that_would_fail_later_are_refused_at_load_time(overrides, message):
    with pytest.raises(ConfigError) as raised:
        build_config(MINIMAL, overrides)
    assert str(raised.value).startswith(message)


def test_defaults_follow_the_choices_they_depend_on():
    bpe = build_config(MINIMAL, ["tokenizer.train.kind=bpe"]).tokenizer.train
    assert bpe.special_tokens == ["<pad>", "<unk>", "<s>", "</s>"]
    assert build_config(MINIMAL).tokenizer.train.special_tokens == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert build_config(MINIMAL, ["preprocess.task=causal_lm"]).train.model == "gpt2"
    assert build_config(MINIMAL).train.model == "mlp"


def test_a_trained_bpe_tokenizer_with_default_tokens_builds(docstring_records):
    from pipeline.tokenizer import train_tokenizer

    cfg = build_config(MINIMAL, ["tokenizer.train.kind=bpe", "tokenizer.train.vocab_size=300"]).tokenizer.train
    tokenizer = train_tokenizer((r["text"] for r in docstring_records[:50]), cfg)
    assert tokenizer.pad_token == "<pad>" and tokenizer.eos_token == "</s>"


def test_required_keys_have_no_default():
    with pytest.raises(ConfigError, match="config key tokenizer: required key is missing"):
        build_config({"run_dir": "x", "data": {"input": "corpus.jsonl"}})
    # Without a data section there is no corpus: required unless train.datasets names the sources.
    with pytest.raises(ConfigError, match="config key data.input: is required: the corpus to preprocess"):
        build_config({"run_dir": "x", "tokenizer": {"train": {}}, "preprocess": {"task": "causal_lm"}})


def test_override_without_equals_is_rejected():
    with pytest.raises(ConfigError, match="dotted.key=value"):
        parse_override("train.lr")


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_round_trips_and_gives_every_stage_a_command(path, tmp_path):
    from pipeline import driver

    config = load_config(path)
    save_config(config, str(tmp_path / "saved.yaml"))
    assert load_config(tmp_path / "saved.yaml").to_dict() == config.to_dict()
    spark_here = importlib.util.find_spec("pyspark") is not None  # the current stack has no spark-submit
    for stage in driver.STAGES if spark_here else ("train", "evaluate"):
        command = driver.stage_command(stage, config.model_copy(update={"data": config.data.model_copy(update={"input": str(path)})}))
        assert command and str(driver.resolved_config_path(config)) in command, (stage, command)


def test_section_hash_changes_only_with_its_sections():
    base = build_config(MINIMAL)
    changed_train = build_config(MINIMAL, ["train.lr=0.5"])
    assert base.section_hash("data", "preprocess") == changed_train.section_hash("data", "preprocess")
    assert base.section_hash("train") != changed_train.section_hash("train")
