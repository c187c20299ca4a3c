"""Preprocess memory: peak RSS of the driver (Python and its JVM) and of each Spark Python worker,
sampled every 0.2 s, building 1x and 4x the data; each size in a fresh process. Not run in CI.

    SHARDLINE_BENCH_MEMORY=1 python benchmarks/bench_preprocess_memory.py [--copies 22] [--workdir runs/bench-mem] [--quality]
        [--driver-memory 1g] [--cluster [--executor-memory 1g]] [--live-every SECONDS] [--runs 1]

The corpus is real text with unique documents: GCIDE's 126,240 entries (corpora.py), repeated
`copies` times with a per-copy prefix ("[k] "), so dedup keeps every one and the output grows with
the input; 22 copies are 1.0 GB of JSONL, the 4x run 4.1 GB. Prints, per size, the peak RSS of the
driver Python process, of its JVM (local mode: the driver JVM is also the executor), the largest
of any Python worker, and the ratios 4x/1x (target: flat within 10 %; driver <= 1 GiB), and the
largest Python worker's peak per Spark stage, to tell which stage grows. Stages are named by their
job's description (the phase: "near-dedup: connected components in one task") and call site. It
also prints the largest peak execution memory of any task (what Spark's memory manager gave it for
sorts, aggregations and shuffle buffers; exact, from the task metrics, not sampled), per stage and
overall. The JVM's RSS follows its heap, which grows toward spark.driver.memory whatever the job
keeps alive; so it also prints the largest heap occupancy right after a collection (from -Xlog:gc;
an upper bound on what the job held), and --driver-memory runs both sizes under a smaller heap.

--cluster runs both sizes on a Spark standalone cluster started here (one master, one 2-core
worker: tests/standalone_cluster.py), so the executor is a JVM of its own, with its own heap
(--executor-memory) and GC log: it prints the executor JVM and its Python workers apart from the
driver, which on a cluster keeps the job's plan and its tasks' bookkeeping, not the data.

--live-every S makes every JVM of the job run a full collection every S seconds (jcmd GC.run) and
prints the largest heap right after one: what the job kept alive, where the heap after any
collection also counts garbage a young collection left; on the cluster, also per stage running
when the collection was asked for. The collections cost time: compare memory, not seconds, from
such a run. A largest-of-samples figure is noisy (the 4x run is longer and takes more samples):
--runs N builds each size N times, alternating, and compares the medians.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.append(str(ROOT / "tests"))  # standalone_cluster, shared with the cluster tests
EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"  # in the command line of a standalone executor's JVM


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process below pid."""
    from bench_preprocess import process_tree

    return [(child, command_line(child)) for child in process_tree(pid)[1:]]


def executor_jvms() -> list[int]:
    """The pids of standalone executor JVMs on this machine (children of the worker daemon)."""
    pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    return [pid for pid in pids if EXECUTOR_MAIN in command_line(pid)]


class Sampler(threading.Thread):
    """Peak RSS per kind of process, and the largest Python worker's peak per running Spark stage
    (named by its call site, as the Spark UI names it). With live_every, every JVM of the job is also
    made to run a full collection that often (jcmd GC.run), so its GC log gives its live heap."""

    def __init__(self, spark_context=None, cluster: bool = False, live_every: float = 0.0):
        super().__init__(daemon=True)
        self.cluster = cluster  # executors are JVMs of their own, found by scanning /proc
        self.live_every, self.last_collection = live_every, time.monotonic()
        self.peaks = {"driver_python": 0.0, "driver_jvm": 0.0, "python_worker": 0.0, "executor_jvm": 0.0}
        self.worker_by_stage: dict[str, float] = {}
        self.stages_at_executor_collection: list[list[str]] = []  # per GC.run the executor ran, in order
        self.spark_context = spark_context
        self.stop = threading.Event()

    def _stages(self) -> list[str]:
        """The running stages, each by its job's description (the job's phase, as progress.described
        names it) and its call site; adaptive execution's stages have no call site of ours."""
        if self.spark_context is None:
            return []
        running = self.spark_context._jsc.sc().statusStore().activeStages()  # the Spark UI's own store
        return [stage_label(running.apply(index)) for index in range(running.size())]

    def run(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            self.peaks["driver_python"] = max(self.peaks["driver_python"], rss_mb(me))
            worker = 0.0
            jvms = []
            for pid, cmd in descendants(me):
                kind = "driver_jvm" if "java" in cmd.split(" ")[0] else "python_worker" if "pyspark" in cmd else None
                if kind == "driver_jvm":
                    jvms.append(pid)
                if kind:
                    self.peaks[kind] = max(self.peaks[kind], rss_mb(pid))
                if kind == "python_worker":
                    worker = max(worker, rss_mb(pid))
            executors = executor_jvms() if self.cluster else []
            for executor in executors:  # the executor and its Python workers
                jvms.append(executor)
                self.peaks["executor_jvm"] = max(self.peaks["executor_jvm"], rss_mb(executor))
                for pid, cmd in descendants(executor):
                    if "pyspark" in cmd:
                        worker = max(worker, rss_mb(pid))
                        self.peaks["python_worker"] = max(self.peaks["python_worker"], rss_mb(pid))
            for stage in self._stages():
                self.worker_by_stage[stage] = max(self.worker_by_stage.get(stage, 0.0), worker)
            if self.live_every and time.monotonic() - self.last_collection >= self.live_every:
                stages = self._stages()  # those running when the collection starts
                for pid in jvms:  # a full collection, logged as "Pause Full (Diagnostic Command)"
                    ran = subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60)
                    if pid in executors and ran.returncode == 0:
                        self.stages_at_executor_collection.append(stages)
                self.last_collection = time.monotonic()
            time.sleep(0.2)


def heap_after_gc_mb(gc_log: Path) -> tuple[float, float, float]:
    """(the largest heap occupancy right after a collection, the largest heap committed, the largest
    right after a full collection that live_every asked for) in MB, from the JVM's -Xlog:gc lines
    ("GC(7) Pause Young (Normal) (G1 Evacuation Pause) 412M->96M(1024M) 8.1ms"). The first is an
    upper bound on what the job kept alive (a young collection leaves old garbage in place), apart
    from what the heap grew to hold between collections; the last is what it kept alive then."""
    import re

    after = committed = live = 0.0
    for found in re.finditer(r"(Pause Full \(Diagnostic Command\) )?\d+M->(\d+)M\((\d+)M\)",
                             gc_log.read_text() if gc_log.exists() else ""):
        after, committed = max(after, float(found.group(2))), max(committed, float(found.group(3)))
        if found.group(1):
            live = max(live, float(found.group(2)))
    return after, committed, live


def stage_label(stage) -> str:
    """A stage (the status store's StageData) as "its job's description: its call site"."""
    site = stage.name().replace(str(ROOT) + "/", "")
    return f"{stage.description().get()}: {site}" if stage.description().isDefined() else site


def live_heap_by_stage(gc_log: Path, stages_at_collection: list[list[str]]) -> dict[str, float]:
    """The largest heap right after a requested full collection, per stage running when it was
    requested: the n-th "Pause Full (Diagnostic Command)" of the log is the n-th GC.run (one
    executor: the bench's cluster has one worker)."""
    import re

    live: dict[str, float] = {}
    after = re.findall(r"Pause Full \(Diagnostic Command\) \d+M->(\d+)M", gc_log.read_text() if gc_log.exists() else "")
    for mb, stages in zip(after, stages_at_collection):
        for stage in stages:
            live[stage] = max(live.get(stage, 0.0), float(mb))
    return live


def task_memory_by_stage(spark_context) -> dict[str, float]:
    """The largest peak execution memory of any task (sort pages, aggregation maps, shuffle buffers:
    what Spark's memory manager gave the task, counted exactly, not sampled) per stage, in MB, from
    the driver's status store."""
    store, tracker = spark_context._jsc.sc().statusStore(), spark_context.statusTracker()
    largest: dict[str, float] = {}
    for job in tracker.getJobIdsForGroup(None):
        for stage_id in tracker.getJobInfo(job).stageIds:
            tasks = store.taskList(stage_id, 0, 1 << 30)  # none for a stage skipped (its shuffle reused)
            peaks = [tasks.apply(i).taskMetrics().get().peakExecutionMemory() for i in range(tasks.size())
                     if tasks.apply(i).taskMetrics().isDefined()]
            if peaks:
                label = stage_label(store.lastStageAttempt(stage_id))
                largest[label] = max(largest.get(label, 0.0), max(peaks) / 2**20)
    return largest


def child(corpus: str, run_dir: str, max_length: int, quality: bool, driver_memory: str, master: str,
          executor_memory: str, live_every: float) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from bench_preprocess import TOKENIZER
    from pipeline.config import build_config
    from spark_jobs.preprocess import build_dataset

    preprocess = {"max_length": max_length}
    if quality:  # every filter computed (none removes), language, near-dedup: bench_quality's cost setting
        from bench_quality import PERMISSIVE

        preprocess.update(collapse_whitespace=False, quality={
            **PERMISSIVE, "language": {"keep": ["en", "la", "fr", "de"], "min_score": 0.0}, "near_dedup": {},
            "max_removed_fraction": 1.0})
    config = build_config({"run_dir": run_dir, "data": {"input": corpus, "label_column": "label"},
                           "tokenizer": {"path": TOKENIZER}, "preprocess": preprocess})
    gc_log, executor_gc_log = Path(run_dir + "-gc.log"), Path(run_dir + "-executor-gc.log")
    gc_log.unlink(missing_ok=True)
    executor_gc_log.unlink(missing_ok=True)
    builder = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", driver_memory)
               .config("spark.driver.extraJavaOptions", f"-Xlog:gc:file={gc_log}"))
    if master.startswith("spark://"):
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.executor.memory", executor_memory)
                   .config("spark.executor.extraJavaOptions", f"-Xlog:gc:file={executor_gc_log}"))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    sampler = Sampler(session.sparkContext, cluster=master.startswith("spark://"), live_every=live_every)
    sampler.start()
    started = time.perf_counter()
    manifest = build_dataset(session, config)
    seconds = time.perf_counter() - started
    sampler.stop.set()
    task_memory = task_memory_by_stage(session.sparkContext)
    session.stop()
    heap_after_gc, heap_committed, live_heap = heap_after_gc_mb(gc_log)
    executor_heap_after_gc, executor_heap_committed, executor_live_heap = heap_after_gc_mb(executor_gc_log)
    print(json.dumps({"docs": manifest.input_records, "seconds": seconds, "stages": manifest.stage_seconds,
                      "load": os.getloadavg()[0], "worker_by_stage": sampler.worker_by_stage,
                      "executor_live_by_stage": live_heap_by_stage(executor_gc_log,
                                                                   sampler.stages_at_executor_collection),
                      "task_memory_by_stage": task_memory, "task_memory": max(task_memory.values(), default=0.0),
                      **sampler.peaks,
                      "heap_after_gc": heap_after_gc, "heap_committed": heap_committed,
                      "executor_heap_after_gc": executor_heap_after_gc,
                      "executor_heap_committed": executor_heap_committed, "live_heap": live_heap,
                      "executor_live_heap": executor_live_heap}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=22, help="GCIDE copies in the 1x corpus (22: 1.0 GB)")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--workdir", default="runs/bench-mem")
    parser.add_argument("--quality", action="store_true",
                        help="with every quality filter, language and near-dedup on (see bench_quality.py)")
    parser.add_argument("--driver-memory", default="1g",
                        help="spark.driver.memory (local mode: the heap of the one JVM, driver and executor)")
    parser.add_argument("--cluster", action="store_true",
                        help="on a standalone cluster started here (one 2-core worker): the executor is its own JVM")
    parser.add_argument("--executor-memory", default="1g", help="spark.executor.memory with --cluster")
    parser.add_argument("--live-every", type=float, default=0.0, metavar="SECONDS",
                        help="make every JVM of the job run a full collection this often, to print its live heap "
                             "(the largest after such a collection); 0: never")
    parser.add_argument("--runs", type=int, default=1,
                        help="build each size this many times, alternating, and compare the medians")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child[:2], args.max_length, args.quality, args.driver_memory, args.child[2], args.executor_memory,
              args.live_every)
        return
    if not os.environ.get("SHARDLINE_BENCH_MEMORY"):
        sys.exit("set SHARDLINE_BENCH_MEMORY=1 to run this (it writes and preprocesses 5x copies of GCIDE)")
    if args.live_every and not shutil.which("jcmd"):
        sys.exit("--live-every needs jcmd on PATH (it comes with a JDK, not with a JRE)")
    import corpora

    work = Path(args.workdir).resolve()
    entries = corpora.gcide_entries(Path("runs/bench").resolve())
    with ExitStack() as stack:
        master = "local[2]"
        if args.cluster:
            from standalone_cluster import daemon_env, standalone_cluster

            cluster_dir = work / "cluster"
            shutil.rmtree(cluster_dir, ignore_errors=True)
            cluster_dir.mkdir(parents=True)
            master, _ = stack.enter_context(standalone_cluster(cluster_dir, daemon_env(cluster_dir), cores=2,
                                                               memory=args.executor_memory))
        results = run_sizes(args, work, entries, master)
    report(args, results)


def run_sizes(args: argparse.Namespace, work: Path, entries: list, master: str) -> list[dict]:
    """Each size in a fresh driver process (and, on the cluster, a fresh executor: a new application),
    x1 then x4, args.runs times."""
    import corpora

    results = []
    for factor in (1, 4) * args.runs:
        corpus = work / f"gcide-x{args.copies * factor}.jsonl"
        if not corpus.exists():
            corpora.write_jsonl(entries, corpus, copies=args.copies * factor)
        run_dir = work / f"run-x{factor}"
        shutil.rmtree(run_dir, ignore_errors=True)
        out = subprocess.run([sys.executable, __file__, "--child", str(corpus), str(run_dir), master,
                              "--max-length", str(args.max_length), "--driver-memory", args.driver_memory,
                              "--executor-memory", args.executor_memory, "--live-every", str(args.live_every)]
                             + (["--quality"] if args.quality else []),
                             capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr[-3000:])
        result = json.loads(out.stdout.strip().splitlines()[-1])
        result.update(factor=factor, mb=corpus.stat().st_size / 2**20)
        results.append(result)
        print(f"{factor}x: {result['mb']:.0f} MB, {result['docs']} docs in {result['seconds']:.0f} s "
              f"({result['docs'] / result['seconds']:.0f} docs/s, load {result['load']:.1f}): peak RSS driver Python "
              f"{result['driver_python']:.0f} MB, driver JVM {result['driver_jvm']:.0f} MB, largest Python worker "
              f"{result['python_worker']:.0f} MB; JVM heap after a collection at most {result['heap_after_gc']:.0f} MB "
              f"of {result['heap_committed']:.0f} MB committed (spark.driver.memory {args.driver_memory}); "
              + (f"its live heap at most {result['live_heap']:.0f} MB; " if args.live_every else "")
              + (f"executor JVM {result['executor_jvm']:.0f} MB, its heap after a collection at most "
                 f"{result['executor_heap_after_gc']:.0f} MB of {result['executor_heap_committed']:.0f} MB committed "
                 f"(spark.executor.memory {args.executor_memory}); " if args.cluster else "")
              + (f"executor live heap at most {result['executor_live_heap']:.0f} MB; "
                 if args.cluster and args.live_every else "")
              + f"stages {result['stages']}", flush=True)
    return results


def report(args: argparse.Namespace, results: list[dict]) -> None:
    small, large = (median_of([r for r in results if r["factor"] == factor]) for factor in (1, 4))
    if args.runs > 1:
        print(f"medians of {args.runs} runs of each size:")
    kinds = ["driver_python", "driver_jvm", "python_worker", "task_memory", "heap_after_gc"]
    kinds += ["live_heap"] if args.live_every else []
    if args.cluster:
        kinds += ["executor_jvm", "executor_heap_after_gc"] + (["executor_live_heap"] if args.live_every else [])
    for kind in kinds:
        each = "" if args.runs == 1 else "  (x1: {}; x4: {})".format(
            *(", ".join(f"{r[kind]:.0f}" for r in results if r["factor"] == factor) for factor in (1, 4)))
        print(f"{kind:14s} 4x/1x: {large[kind] / max(small[kind], 1e-9):.3f} (target <= 1.10){each}")
    by_stage("largest Python worker per stage", "worker_by_stage", small, large)
    by_stage("largest peak execution memory of a task per stage", "task_memory_by_stage", small, large)
    if args.cluster and args.live_every:
        by_stage("executor live heap per running stage (largest after a full collection)", "executor_live_by_stage",
                 small, large)


def median_of(runs: list[dict]) -> dict:
    """Each number's median over the runs of one size, and each per-stage figure's (0 in a run
    where the stage had none)."""
    import statistics

    merged = {key: statistics.median(r[key] for r in runs) for key, value in runs[0].items()
              if isinstance(value, (int, float))}
    for key in ("worker_by_stage", "task_memory_by_stage", "executor_live_by_stage"):
        stages = set().union(*(r[key] for r in runs))
        merged[key] = {stage: statistics.median(r[key].get(stage, 0.0) for r in runs) for stage in stages}
    return merged


def by_stage(title: str, key: str, small: dict, large: dict) -> None:
    """One figure per stage (its job's description and call site), 1x -> 4x: which stage grows."""
    print(f"{title}, 1x -> 4x:")
    for stage in sorted(set(small[key]) | set(large[key])):
        one, four = small[key].get(stage, 0.0), large[key].get(stage, 0.0)
        print(f"  {stage:60s} {one:6.1f} -> {four:6.1f} MB" + (f" ({four / one:.3f})" if one else ""))


if __name__ == "__main__":
    main()
