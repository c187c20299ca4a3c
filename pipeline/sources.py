"""A mixture's sources that the run preprocesses itself (train.datasets entries with `input`).

Each becomes a config of its own, a run_dir under the run's (run_dir/sources/<name>/, so its
dataset is run_dir/sources/<name>/dataset) that the ordinary Spark job builds. Every source of a
mixture must share one tokenizer: a tokenizer.path config gives it to all of them; a trained one
(tokenizer.train) is trained by the first such source's job and read by the others
(tokenizer.path of that source's tokenizer/), which therefore run after it (in parallel in the DAG).
"""
from __future__ import annotations

from pipeline.config import MixSourceConfig, ShardlineConfig
from pipeline.errors import ShardlineError


class UnknownSourceError(ShardlineError):
    """--source names no source of train.datasets that the run preprocesses."""


def built_sources(config: ShardlineConfig) -> list[MixSourceConfig]:
    """The train.datasets entries the run preprocesses (those with `input`), in config order."""
    return [entry for entry in config.train.datasets or () if entry.input is not None]


def trains_tokenizer(config: ShardlineConfig) -> bool:
    """Whether the first built source trains the tokenizer the others then read."""
    return config.tokenizer.train is not None and bool(built_sources(config))


def source_config(config: ShardlineConfig, name: str) -> ShardlineConfig:
    """The config that preprocesses source `name`: its own run_dir and data.input, the run's data,
    tokenizer and preprocess settings otherwise (the first source's tokenizer for the later ones)."""
    built = built_sources(config)
    entry = next((e for e in built if e.name == name), None)
    if entry is None:
        names = ", ".join(e.name for e in built) or "none"
        raise UnknownSourceError(f"--source {name}: train.datasets has no source {name} with an input to "
                                 f"preprocess (those it has: {names})")
    tree = config.to_dict()
    tree["run_dir"] = config.run_path("sources", name)
    tree["data"]["input"] = entry.input
    tree["train"]["datasets"] = None
    if trains_tokenizer(config) and entry.name != built[0].name:
        tree["tokenizer"] = {"path": config.run_path("sources", built[0].name, "tokenizer")}
    return ShardlineConfig.model_validate(tree)


def preprocess_waves(config: ShardlineConfig) -> dict[str, list[str | None]]:
    """The Spark jobs a run needs, in two waves for a scheduler: `first` (the run's own dataset, None;
    or the mixture source that trains the tokenizer), then `rest`, which may run in parallel."""
    if config.train.datasets is None:
        return {"first": [None], "rest": []}
    names = [entry.name for entry in built_sources(config)]
    if trains_tokenizer(config):
        return {"first": names[:1], "rest": names[1:]}
    return {"first": [], "rest": names}
