"""docs/config.md is generated from the config models and must be current; every key is described."""
from pipeline.config import ShardlineConfig
from pipeline.config_reference import REFERENCE_PATH, reference_rows, render_reference


def test_config_reference_is_current():
    assert REFERENCE_PATH.exists(), "docs/config.md is missing: run `make config-docs`"
    assert REFERENCE_PATH.read_text() == render_reference(), "docs/config.md is stale: run `make config-docs`"


def test_every_config_key_has_a_description():
    undescribed = [key for key, _, _, meaning in reference_rows(ShardlineConfig) if not meaning.strip()]
    assert undescribed == []


def test_reference_rows_take_meaning_from_field_descriptions_and_bounds_from_fields():
    rows = {row[0]: row[1:] for row in reference_rows(ShardlineConfig)}
    nproc = ShardlineConfig.model_fields["train"].annotation.model_fields["nproc"]
    assert rows["train.nproc"] == ("int (≥ 1)", "`1`", nproc.description)
    assert "torchrun --nproc_per_node" in nproc.description  # the attribute docstring, kept by pydantic
    assert rows["run_dir"][:2] == ("str", "**required**")
    assert rows["data.label_column"][:2] == ("str or null", "null")
    assert rows["train.model_config"][1] == "`{}`"  # the YAML key is the alias, not the Python name
    assert rows["spark.conf"][:2] == ("dict[str, str]", "`{}`")
    # The JSON schema carries the same text, for editors and other tools.
    schema = ShardlineConfig.model_json_schema()
    assert schema["$defs"]["TrainConfig"]["properties"]["nproc"]["description"] == nproc.description
