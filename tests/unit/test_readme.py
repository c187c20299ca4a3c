"""The README (and docs/performance.md, its measurements) names only config keys that exist, and its first
screen keeps the two set-up commands."""
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from pipeline.config import ShardlineConfig

README = Path(__file__).resolve().parents[2] / "README.md"
PERFORMANCE = README.parent / "docs" / "performance.md"  # the README's measurements, in full
SECTIONS = "|".join(ShardlineConfig.model_fields) + "|driver"  # driver.* once appeared here without existing
# A dotted key: a top-level section, then names (or `*`); not part of a path or a longer word.
DOTTED_KEY = re.compile(rf"(?<![\w./:-])((?:{SECTIONS})(?:\.(?:[A-Za-z_]\w*|\*))+)(?![\w/-])")
FILE_SUFFIXES = {"json", "jsonl", "log", "py", "yaml", "md"}


def readme_keys(text: str) -> set[str]:
    """Dotted keys in inline code, and in `--set key=value` arguments anywhere (code blocks too)."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    candidates = [span for span in re.findall(r"`([^`\n]+)`", prose)
                  if "--conf" not in span and "unknown key" not in span]  # Spark conf names; the typo example
    candidates += re.findall(r"--set '?([\w.*]+)=", text)
    keys = {match for span in candidates for match in DOTTED_KEY.findall(span)}
    return {key for key in keys if key.rsplit(".", 1)[-1] not in FILE_SUFFIXES}  # eval.json is a file


def key_exists(key: str) -> bool:
    model: type[BaseModel] | None = ShardlineConfig
    for part in key.split("."):
        if model is None:  # inside a free-form map (spark.conf, train.model_config): any name
            return True
        if part == "*":
            return True
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        if part not in fields:
            return False
        annotation = fields[part].annotation
        nested = [a for a in (getattr(annotation, "__args__", None) or (annotation,))
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        model = nested[0] if nested else None
    return True


def test_key_check_tells_real_keys_from_made_up_ones():
    assert readme_keys("set `train.lr` or `--set spark.conf.spark.ui.enabled=false`; see `eval.json`, "
                       "`training/train.py`, `driver.*`") == {"train.lr", "spark.conf.spark.ui.enabled", "driver.*"}
    assert [key_exists(k) for k in ("train.lr", "spark.conf.anything.here", "spark.*", "driver.*", "train.lrr")] == [
        True, True, True, False, False]


@pytest.mark.parametrize("doc, least", [(README, 20), (PERFORMANCE, 3)], ids=["README", "performance"])
def test_every_config_key_the_docs_name_exists(doc, least):
    keys = readme_keys(doc.read_text())
    assert len(keys) > least  # the extraction finds the document's keys at all
    assert sorted(key for key in keys if not key_exists(key)) == []


@pytest.mark.parametrize("command", ["make demo", "make test"])
def test_first_screen_shows_the_two_setup_commands(command):
    first_screen = "\n".join(README.read_text().splitlines()[:24])
    assert command in first_screen
