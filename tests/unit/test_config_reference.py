"""docs/config.md is generated from the config models and must be current."""
from pipeline.config_reference import REFERENCE_PATH, reference_rows, field_comments, render_reference
from pipeline.config import ShardlineConfig


def test_config_reference_is_current():
    assert REFERENCE_PATH.exists(), "docs/config.md is missing: run `make config-docs`"
    assert REFERENCE_PATH.read_text() == render_reference(), "docs/config.md is stale: run `make config-docs`"


def test_reference_rows_take_meaning_from_field_comments_and_bounds_from_fields():
    rows = {row[0]: row[1:] for row in reference_rows(ShardlineConfig, field_comments())}
    assert rows["train.nproc"] == ("int (≥ 1)", "`1`", "data-parallel processes (torchrun --nproc_per_node)")
    assert rows["run_dir"] == ("str", "**required**", "a local path or a URI (s3://bucket/runs/x, gs://…, hdfs://…)")
    assert rows["data.label_column"][:2] == ("str or null", "null")
    assert rows["train.model_config"][1] == "`{}`"  # the YAML key is the alias, not the Python name
    assert rows["spark.conf"] == ("dict[str, str]", "`{}`", "passed through as --conf key=value")
