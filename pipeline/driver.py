"""The driver: runs preprocess -> train -> evaluate, skipping the stages that are already done.

Every stage runs as a subprocess built as an argument list, never a shell string: Spark through
`spark-submit`, training as train.launcher says (pipeline/launch.py: `python -m training.train`,
`torchrun`, or TorchDistributor through `spark-submit`).
Its full output goes to run_dir/logs/<stage>.log, its progress lines to the console.

A stage that succeeds writes run_dir/stages/<stage>.json: a hash of each config section it depends
on and a fingerprint of its inputs. A later run skips the stage when the marker matches, its output
is there and no earlier stage ran in the same invocation; a changed training key therefore reruns
train and evaluate but not preprocess, and an unchanged rerun starts no JVM and no training process.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import console, contract, inputs, jvm_archive, launch, sources, storage
from pipeline.config import ShardlineConfig, save_config
from pipeline.errors import ShardlineError

PREPROCESS_SCRIPT = Path(__file__).resolve().parent.parent / "spark_jobs" / "preprocess.py"
STAGES = ("preprocess", "train", "evaluate")
# The config sections each stage's output depends on (spark.* never changes results).
STAGE_SECTIONS = {
    "preprocess": contract.DATASET_SECTIONS,
    "train": (*contract.DATASET_SECTIONS, "train"),
    "evaluate": (*contract.DATASET_SECTIONS, "train", "eval"),
}
MARKER_DIR = "stages"
RESOLVED_CONFIG = launch.RESOLVED_CONFIG
USER_ERROR_EXIT = 2  # what every stage exits with on a ShardlineError (its one-line message on stderr)


class StageFailed(RuntimeError):
    def __init__(self, stage: str, code: int, log_path: Path):
        if code == USER_ERROR_EXIT:
            message = f"{stage} stopped on the error above; full log: {log_path}"
        else:
            message = f"{stage} failed with exit code {code}; full log: {log_path}"
        super().__init__(message)
        self.stage, self.code, self.log_path = stage, code, log_path


class StageOrderError(ShardlineError):
    """--from/--to name an empty range, or a skipped earlier stage left no output to start from."""


@dataclass(frozen=True)
class StagePlan:
    stage: str
    run: bool
    reason: str  # why it runs, or why it is skipped
    command: list[str]
    source: str | None = None  # preprocess of this mixture source (train.datasets), into run_dir/sources/<name>

    @property
    def label(self) -> str:
        return f"{self.stage} {self.source}" if self.source else self.stage


# --- commands -------------------------------------------------------------------------------------

spark_submit_executable = launch.spark_submit_executable


def spark_submit_command(config: ShardlineConfig, config_path: Path, force: bool = False,
                         source: str | None = None) -> list[str]:
    """The Spark job on config_path; with source, the job builds that mixture source."""
    built = sources.source_config(config, source) if source else config
    command = [*launch.spark_submit_args(config, preprocess_input_bytes(built)), str(PREPROCESS_SCRIPT),
               "--config", str(config_path)]
    if source:
        command += ["--source", source]
    if force:
        command.append("--force")
    return command


def preprocess_input_bytes(config: ShardlineConfig) -> int | None:
    """The corpus's size, for a local master's JIT choice (jvm_archive.quick_jit); a cluster's
    driver does not need it, so its input is not listed here once more."""
    if config.spark.driver_jit != "auto" or not jvm_archive.runs_tasks_in_driver(config.spark.master):
        return None
    return sum(entry.size for entry in inputs.resolve_input_files(config.data.input))


def train_command(config: ShardlineConfig, config_path: Path) -> list[str]:
    return launch.train_command(config, config_path)


def evaluate_command(config: ShardlineConfig, config_path: Path) -> list[str]:
    return [sys.executable, "-m", "training.evaluate", "--config", str(config_path)]


def resolved_config_path(config: ShardlineConfig) -> str:
    """The resolved config every stage is started with: a local file (stages and spark-submit read
    it before any storage option is known), copied to run_dir as the run's record."""
    return os.path.join(config.local_dir, RESOLVED_CONFIG)


def stage_command(stage: str, config: ShardlineConfig, force_preprocess: bool = False) -> list[str]:
    config_path = Path(resolved_config_path(config))
    if stage == "preprocess":
        return spark_submit_command(config, config_path, force_preprocess)
    if stage == "train":
        return train_command(config, config_path)
    return evaluate_command(config, config_path)


# --- markers --------------------------------------------------------------------------------------

def stage_output(stage: str, config: ShardlineConfig) -> str:
    """The file whose presence says the stage's output is complete (each is written last)."""
    return {
        "preprocess": storage.join(config.dataset_dir, contract.SUCCESS_FILE),
        "train": storage.join(config.model_dir, storage.COMMIT_FILE),
        "evaluate": config.run_path("eval.json"),
    }[stage]


def output_exists(stage: str, config: ShardlineConfig) -> bool:
    if stage == "preprocess" and config.train.datasets is not None:  # a mixture: every source's dataset
        return all(storage.info(storage.join(config.source_dataset_dir(entry), contract.SUCCESS_FILE)) is not None
                   for entry in config.train.datasets)
    return storage.info(stage_output(stage, config)) is not None


def marker_path(config: ShardlineConfig, stage: str) -> str:
    return config.run_path(MARKER_DIR, f"{stage}.json")


def read_marker(config: ShardlineConfig, stage: str) -> dict[str, Any] | None:
    try:
        return json.loads(storage.read_text(marker_path(config, stage)))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def section_hashes(config: ShardlineConfig, stage: str) -> dict[str, str]:
    return {name: config.section_hash(name) for name in STAGE_SECTIONS[stage]}


def stage_inputs(config: ShardlineConfig, stage: str) -> dict[str, Any]:
    """What a stage reads besides its config, as the one dataset identity the Spark job and the
    trainer use too: a change here reruns it even with the same config."""
    if stage == "preprocess":
        files = inputs.resolve_input_files(config.data.input)
        return {"dataset_fingerprint": inputs.dataset_fingerprint(config, files)}
    if config.train.datasets is None:
        fingerprint = _fingerprint_of(config.dataset_dir)
    else:
        fingerprint = {entry.name: _fingerprint_of(config.source_dataset_dir(entry)) for entry in config.train.datasets}
    found = {"dataset_fingerprint": fingerprint}
    if stage == "evaluate":
        found["train_run_id"] = (read_marker(config, "train") or {}).get("run_id")
    return found


def _fingerprint_of(dataset_dir: str) -> str | None:
    try:
        return contract.load_manifest(dataset_dir).dataset_fingerprint
    except (contract.DatasetNotReadyError, FileNotFoundError):
        return None


def write_marker(config: ShardlineConfig, stage: str, command: list[str]) -> None:
    contract.write_json_atomic(marker_path(config, stage), {
        "stage": stage,
        "sections": section_hashes(config, stage),
        "inputs": stage_inputs(config, stage),
        "run_id": uuid.uuid4().hex,  # identifies this output; downstream markers record it
        "command": command,
    })


def skip_reason(config: ShardlineConfig, stage: str) -> tuple[str | None, bool]:
    """(None, _) when the stage is done; else (why it must run, whether only its inputs changed)."""
    marker = read_marker(config, stage)
    if marker is None:
        return f"not done yet in {config.run_dir}", False
    if not output_exists(stage, config):
        return f"its output {stage_output(stage, config)} is missing", False
    recorded = marker.get("sections", {})
    changed = [name for name, value in section_hashes(config, stage).items() if recorded.get(name) != value]
    if changed:
        return f"the {' and '.join(changed)} settings changed since its last run", False
    if marker.get("inputs") != stage_inputs(config, stage):
        return "its input files changed since its last run", True
    return None, False


def plan_stages(
    config: ShardlineConfig, first: str = STAGES[0], last: str = STAGES[-1], force: bool = False
) -> list[StagePlan]:
    """Decide, before running anything, which stages in [first, last] run and why."""
    selected = STAGES[STAGES.index(first): STAGES.index(last) + 1]
    if not selected:  # only `run --from X --to Y` can ask for this
        raise StageOrderError(f"--from {first} comes after --to {last}; stages run in the order {' -> '.join(STAGES)}")
    storage.check_reachable(config.run_dir)
    for earlier in STAGES[: STAGES.index(first)]:
        if not output_exists(earlier, config):
            raise StageOrderError(
                f"{first} needs the output of {earlier}, {stage_output(earlier, config)}, which is missing; "
                f"run `shardline {earlier}` with the same config first (or `shardline run` for every stage)"
            )
    plans: list[StagePlan] = []
    upstream_ran = None
    for stage in selected:
        if stage == "preprocess" and config.train.datasets is not None:
            source_plans = plan_sources(config, force)
            plans += source_plans
            upstream_ran = next((plan.label for plan in source_plans if plan.run), upstream_ran)
            continue
        if force:
            reason, inputs_only = "--force was given", False
        elif upstream_ran:
            reason, inputs_only = f"it reads the new output of {upstream_ran}", False
        else:
            reason, inputs_only = skip_reason(config, stage)
        if stage == "preprocess" and reason is not None:
            inputs.resolve_input_files(config.data.input)  # a missing input fails here, in one line, before a JVM starts
            if not force and not inputs_only:
                refuse_replacing_dataset(config)
        # Same dataset config but changed input files: the job would refuse, so make it rebuild.
        force_preprocess = force or (stage == "preprocess" and inputs_only)
        plans.append(StagePlan(stage, reason is not None, reason or "", stage_command(stage, config, force_preprocess)))
        if reason is not None:
            upstream_ran = stage
    return plans


def plan_sources(config: ShardlineConfig, force: bool) -> list[StagePlan]:
    """A mixture's preprocess: one Spark job per source with an input, each skipped by its own marker
    (run_dir/sources/<name>/stages/); when the first trains the tokenizer and runs, the others rerun."""
    plans: list[StagePlan] = []
    config_path = Path(resolved_config_path(config))
    for number, entry in enumerate(sources.built_sources(config)):
        built = sources.source_config(config, entry.name)
        if force:
            reason, inputs_only = "--force was given", False
        elif number and plans[0].run and sources.trains_tokenizer(config):
            reason, inputs_only = f"it reads the new tokenizer of {plans[0].source}", True
        else:
            reason, inputs_only = skip_reason(built, "preprocess")
        if reason is not None:
            inputs.resolve_input_files(built.data.input)  # a missing input fails here, before a JVM starts
            if not force and not inputs_only:
                refuse_replacing_dataset(built)
        command = spark_submit_command(config, config_path, force or inputs_only, entry.name)
        plans.append(StagePlan("preprocess", reason is not None, reason or "", command, entry.name))
    return plans


def refuse_replacing_dataset(config: ShardlineConfig) -> None:
    """The Spark job refuses to overwrite a dataset built from another config unless --force is given:
    say so before starting it, the same way in a dry run and a real one."""
    if not storage.exists(storage.join(config.dataset_dir, contract.SUCCESS_FILE)):
        return
    changed = contract.changed_dataset_sections(contract.load_manifest(config.dataset_dir), config.to_dict())
    if changed:
        raise contract.DatasetConflictError(
            f"{config.dataset_dir} was built with other {' and '.join(changed)} settings; add --force to "
            f"rebuild it (the old dataset is replaced), or set run_dir to a new directory to keep both"
        )


# --- running --------------------------------------------------------------------------------------

def stage_environment() -> dict[str, str]:
    env = dict(os.environ)
    # Spark's Python workers must use this interpreter, with its pandas/pyarrow/tokenizers.
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_logged(stage: str, command: list[str], log_path: Path, verbosity: int = 0) -> None:
    """Run command: its whole output goes to log_path; the console gets its progress and results
    (and with verbosity 1 everything; with -1 nothing but errors), see pipeline/console.py."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        env = {**stage_environment(), **console.progress_environment(verbosity)}
        code, _ = console.run_streamed(stage, command, log, env, verbosity)
    if code != 0:
        if code != USER_ERROR_EXIT:  # a crash: its traceback's end is in the log
            print("\n".join(console.log_tail(log_path)), file=sys.stderr)
        raise StageFailed(stage, code, log_path)
    print(f"{stage}: done in {console.format_duration(time.perf_counter() - started)}", flush=True)


def publish_log(config: ShardlineConfig, log_path: Path) -> None:
    """Logs are appended on local disk; a run_dir on an object store gets a copy after the stage."""
    if not storage.is_local(config.run_dir) and log_path.exists():
        storage.write_bytes(config.run_path("logs", log_path.name), log_path.read_bytes())


def run_stages(
    config: ShardlineConfig,
    first: str = STAGES[0],
    last: str = STAGES[-1],
    force: bool = False,
    dry_run: bool = False,
    verbosity: int = 0,
) -> list[StagePlan]:
    """Run (or with dry_run, only print) the stages from first to last; returns the plan."""
    plans = plan_stages(config, first, last, force)
    config_path = resolved_config_path(config)
    if dry_run:
        print(f"dry run: nothing runs; a real run first writes {config_path}")
    else:
        save_config(config, config_path)
        if config_path != config.run_path(RESOLVED_CONFIG):
            save_config(config, config.run_path(RESOLVED_CONFIG))
    for plan in plans:
        if not plan.run:
            print(f"{plan.label}: skipped, already done with this config and inputs (add --force to redo it)",
                  flush=True)
            continue
        note = launch.launch_note(config) if plan.stage == "train" else None
        if dry_run:
            print(f"{plan.label}: would run ({plan.reason}):\n  {shlex.join(plan.command)}", flush=True)
            if note:
                print(note, flush=True)
            continue
        if note:
            print(note, flush=True)
        log_path = Path(config.local_dir) / "logs" / f"{plan.label.replace(' ', '-')}.log"
        print(f"{plan.label}: running ({plan.reason}); full log: {log_path}", flush=True)
        stage_config = sources.source_config(config, plan.source) if plan.source else config  # whose marker
        storage.delete(marker_path(stage_config, plan.stage))  # a half-done rerun is not "done"
        try:
            run_logged(plan.label, plan.command, log_path, verbosity)
        finally:
            publish_log(config, log_path)
        write_marker(stage_config, plan.stage, plan.command)
    return plans
