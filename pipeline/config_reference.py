"""Generates docs/config.md, the config reference, from the models in pipeline/config.py.

    python -m pipeline.config_reference --write    # or: make config-docs
    python -m pipeline.config_reference --check    # exit 1 when docs/config.md is stale

Each key's meaning is its field's description: the attribute docstring under the field in
pipeline/config.py (pydantic's `use_attribute_docstrings`), so the models are the one place to edit,
and the same text reaches the JSON schema (`ShardlineConfig.model_json_schema()`).
"""
from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from pipeline.config import ShardlineConfig

REFERENCE_PATH = Path(__file__).resolve().parent.parent / "docs" / "config.md"
HEADER = """# Config reference

Generated from `pipeline/config.py` by `make config-docs` (`python -m pipeline.config_reference --write`);
do not edit by hand. A test fails when this file is stale.

Keys are dotted paths into the YAML recipe, and the same paths work as `--set key=value` overrides.
**required** keys have no default. Unknown keys are errors.
"""


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:  # a dict's keys or values with bounds of their own: Annotated[int, Field(ge=1)]
        return type_name(args[0]) + _bounds_text([bound for info in args[1:] for bound in info.metadata])
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(arg) for arg in args)
    if annotation is type(None):
        return "null"
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(field) -> str:
    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return ""
    return "null" if value is None else f"`{value}`"


def reference_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, ...]]:
    """(dotted key, type, default, description) for every key under model, depth first."""
    rows = []
    for name, field in model.model_fields.items():
        key = prefix + (field.alias or name)
        annotation = field.annotation
        nested = _nested_model(annotation)
        meaning = " ".join((field.description or "").split())
        rows.append((key, type_name(annotation) + _bounds_text(field.metadata), _default_text(field), meaning))
        if nested is not None:
            rows += reference_rows(nested, key + ".")
    return rows


def _bounds_text(metadata: list) -> str:
    """` (≥ 1)`-style bounds from a field's metadata: Field(ge=..., gt=..., le=..., lt=...)."""
    symbols = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
    bounds = [f"{symbol} {getattr(item, name)}" for item in metadata
              for name, symbol in symbols.items() if getattr(item, name, None) is not None]
    return f" ({', '.join(bounds)})" if bounds else ""


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def render_reference() -> str:
    lines = [HEADER, "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for key, kind, default, meaning in reference_rows(ShardlineConfig):
        lines.append(f"| `{key}` | {kind} | {default} | {meaning.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.config_reference", description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help=f"write {REFERENCE_PATH.name}")
    action.add_argument("--check", action="store_true", help="exit 1 when the file is stale")
    args = parser.parse_args(argv)
    wanted = render_reference()
    if args.write:
        REFERENCE_PATH.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE_PATH.write_text(wanted)
        print(f"wrote {REFERENCE_PATH}")
        return 0
    current = REFERENCE_PATH.read_text() if REFERENCE_PATH.exists() else ""
    if current != wanted:
        print(f"{REFERENCE_PATH} is stale; regenerate it with `make config-docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
