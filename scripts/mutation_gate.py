"""The mutation gate: one-line breaks of the product, each aimed at a guarantee the README states,
run against the tests named for it. Every break must be caught (its tests fail).

    .venv/bin/python scripts/mutation_gate.py [--only NAME ...] [--list]

Each break is applied in a scratch copy of the committed tree (git archive HEAD), never in the
checkout: tests there import the copy (the working directory comes before the editable install,
and the Spark fixture points its workers at the copy's root), the named tests run with `pytest -x`,
and the file is restored before the next break. A break is `caught` when pytest reports failed tests
(exit 1); any other exit (no tests collected, an internal error) is reported as a gate error. The
named tests are first run on the unbroken copy and must pass. On demand, not in CI: it runs a few
hundred tests and starts a JVM per Spark file (about 10 minutes on 2 cores).

A small script rather than mutmut or cosmic-ray: those mutate every operator they find and rerun
the whole suite (or a coverage-picked part) per mutant, which for Spark-tier tests is hours; a gate
of chosen breaks with chosen tests is what says "this guarantee is tested".
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Break:
    name: str
    guarantee: str
    path: str
    old: str  # must occur exactly once in path
    new: str
    tests: tuple[str, ...]


UNIT, SPARK, E2E = "tests/unit/", "tests/spark/", "tests/e2e/"
BREAKS = (
    # Accounting: every input record is a document, a reject or a duplicate, checked before publishing.
    Break("accounting-check-off", "accounting", "spark_jobs/preprocess.py", "    if unaccounted:", "    if False:",
          (UNIT + "test_accounting.py", SPARK + "test_preprocess.py::test_a_row_lost_after_dedup_fails_the_job_and_publishes_nothing")),
    Break("duplicates-uncounted", "accounting", "spark_jobs/clean.py",
          'F.count(F.lit(1)).alias(COPIES))', 'F.lit(1).alias(COPIES))',
          (SPARK + "test_preprocess.py::test_manifest_accounts_for_every_input_record",
           SPARK + "test_preprocess.py::test_every_bad_record_class_is_counted_and_the_identity_holds")),
    Break("input-count-check-off", "accounting", "spark_jobs/input_count.py", "    if problems:", "    if False:",
          (UNIT + "test_accounting.py",
           SPARK + "test_input_count.py::test_a_record_the_read_pass_loses_fails_the_build_before_publishing")),
    Break("read-task-last-batch-dropped", "accounting", "spark_jobs/read.py",
          "    if buffer:\n        yield to_batch(buffer)",
          "    if False:\n        yield to_batch(buffer)",
          (SPARK + "test_input_count.py::test_line_files_count_as_read_across_chunks_compression_damage_and_blank_lines",)),
    Break("csv-read-compressed", "accounting", "spark_jobs/read.py",
          "            raw = open_decompressed(uri)\n        except OSError as error:",
          "            raw = storage.open_binary(uri)\n        except OSError as error:",
          (SPARK + "test_read.py::test_compressed_csv_reads_as_plain_csv_and_a_damaged_one_is_a_corrupt_file_reject",)),
    Break("blank-csv-row-skipped", "accounting", "spark_jobs/read.py",
          "                if len(row) < len(header) and not any(field.strip() for field in row):",
          "                if not any(field.strip() for field in row):",
          (SPARK + "test_read.py::test_a_blank_csv_line_separates_records_and_a_row_of_blank_fields_is_a_record",)),
    # Commit: shards, then manifest.json, then _SUCCESS; strays of failed attempts deleted.
    Break("success-before-manifest", "commit order", "spark_jobs/manifest.py",
          '    contract.write_json_atomic(storage.join(dataset_dir, contract.MANIFEST_FILE), manifest.model_dump(mode="json"))',
          '    storage.write_bytes(storage.join(dataset_dir, contract.SUCCESS_FILE), b""); contract.write_json_atomic(storage.join(dataset_dir, contract.MANIFEST_FILE), manifest.model_dump(mode="json"))',
          (SPARK + "test_preprocess.py::test_the_commit_writes_the_manifest_then_success_last_and_deletes_files_left_during_the_build",)),
    Break("strays-reported-not-deleted", "commit order", "spark_jobs/manifest.py",
          "        storage.delete(entry.uri)\n        removed.append(name)", "        removed.append(name)",
          (SPARK + "test_preprocess.py::test_the_commit_writes_the_manifest_then_success_last_and_deletes_files_left_during_the_build",
           SPARK + "test_object_storage.py::test_a_rebuild_on_s3_removes_stale_attempt_files_and_keeps_the_fingerprint")),
    Break("uncommitted-dataset-read", "refusals", "pipeline/contract.py",
          "    if storage.info(storage.join(dataset_dir, SUCCESS_FILE)) is None:\n        raise DatasetNotReadyError(",
          "    if False:\n        raise DatasetNotReadyError(",
          (UNIT + "test_contract.py", SPARK + "test_object_storage.py::test_an_uncommitted_dataset_on_s3_is_refused")),
    # Exactly once: every row once per epoch on any process count, resume at any position.
    Break("same-order-every-epoch", "exactly-once", "training/data.py",
          "random.Random(spec.seed * 100_003 + epoch).shuffle(indexes)", "random.Random(spec.seed * 100_003).shuffle(indexes)",
          (UNIT + "test_reader.py::test_each_epoch_orders_both_the_row_groups_and_the_rows_inside_them_anew",)),
    Break("ranks-overlap", "exactly-once", "training/data.py",
          "    return positions[(positions // spec.batch_size) % spec.world_size == spec.rank]",
          "    return positions[(positions // spec.batch_size) % spec.world_size == 0]",
          (UNIT + "test_reader.py::test_five_uneven_row_groups_give_every_rank_the_same_batch_count_and_disjoint_rows",)),
    Break("resume-skips-a-batch", "exactly-once", "training/data.py",
          '        self.epoch, self.batch = state["epoch"], state["samples"] // round_size\n        if self.batch >= self.num_batches:',
          '        self.epoch, self.batch = state["epoch"], state["samples"] // round_size + 1\n        if self.batch >= self.num_batches:',
          (UNIT + "test_reader.py::test_the_loader_resumes_at_any_position_as_if_never_stopped",)),
    Break("window-order-ignores-epoch", "exactly-once", "training/data.py",
          "np.random.default_rng([spec.seed, epoch, window])", "np.random.default_rng([spec.seed, 0, window])",
          (UNIT + "test_reader.py::test_each_epoch_orders_both_the_row_groups_and_the_rows_inside_them_anew",)),
    # Mixtures: the weights' shares in every prefix, each source once per pass, weight changes as segments.
    Break("mixture-weights-reversed", "exactly-once", "training/mixture.py",
          "    weights = tuple(s.weight for s in sources)\n", "    weights = tuple(s.weight for s in sources)[::-1]\n",
          (UNIT + "test_mixture.py", UNIT + "test_train_mixture.py")),
    Break("mixture-no-upper-quota", "exactly-once", "training/mixture.py",
          "            if taken[s] * period < counts[s] * (position + 1):", "            if True:",
          (UNIT + "test_mixture.py",)),
    Break("mixture-segment-offsets-lost", "exactly-once", "training/mixture.py",
          "            sources[lo:hi], indexes[lo:hi] = source, index + np.asarray(segment.offsets)[source]",
          "            sources[lo:hi], indexes[lo:hi] = source, index",
          (UNIT + "test_mixture.py", UNIT + "test_train_mixture.py")),
    Break("mixture-ring-too-small", "exactly-once", "training/mixture.py",
          "    return span + 2 * window\n", "    return span + window\n",
          (UNIT + "test_mixture.py::test_small_chunks_wrap_each_sources_ring_and_give_the_same_stream",)),
    Break("mixture-ring-slot-unwrapped", "exactly-once", "training/mixture.py",
          "        return self.base + slots % self.size\n", "        return self.base + slots\n",
          (UNIT + "test_mixture.py::test_small_chunks_wrap_each_sources_ring_and_give_the_same_stream",)),
    Break("mixture-incompatible-accepted", "refusals", "training/mixture.py",
          "        if differences:\n            raise MixtureError(", "        if False:\n            raise MixtureError(",
          (UNIT + "test_mixture.py::test_sources_that_differ_cannot_be_mixed",
           UNIT + "test_train_mixture.py::test_sources_built_differently_are_refused_naming_both")),
    # Byte identity: the same input and config give the same bytes, whatever the order or cluster.
    Break("tie-order-from-input", "byte identity", "spark_jobs/preprocess.py",
          "    return docs.sortWithinPartitions(split.SPLIT, contract.ID_COLUMN, read.TEXT, read.LABEL_RAW)",
          "    return docs.sortWithinPartitions(split.SPLIT, contract.ID_COLUMN)",
          (SPARK + "test_preprocess.py::test_with_dedup_off_the_dataset_is_a_function_of_the_records_not_of_their_order",)),
    Break("no-id-sort", "byte identity", "spark_jobs/preprocess.py",
          "    return docs.sortWithinPartitions(split.SPLIT, contract.ID_COLUMN, read.TEXT, read.LABEL_RAW)",
          "    return docs",
          (SPARK + "test_preprocess.py::test_with_dedup_off_the_dataset_is_a_function_of_the_records_not_of_their_order",)),
    Break("tokenizer-symbols-in-set-order", "byte identity", "pipeline/tokenizer.py",
          "    continuations = sorted({CONTINUATION + c for word in word_counts for c in word[1:]} - set(specials))",
          "    continuations = list({CONTINUATION + c for word in word_counts for c in word[1:]} - set(specials))",
          (E2E + "test_tokenizer_processes.py",)),
    Break("split-ignores-seed", "byte identity", "spark_jobs/split.py",
          "    bucket = F.pmod(F.xxhash64(F.col(contract.ID_COLUMN), F.lit(seed)), F.lit(_BUCKETS))",
          "    bucket = F.pmod(F.xxhash64(F.col(contract.ID_COLUMN)), F.lit(_BUCKETS))",
          (SPARK + "test_split_and_encode.py",)),
    # Checkpoints: exact resume, committed by their checksum, data only.
    Break("rng-not-restored", "checkpoint safety", "training/loop.py",
          '            _set_rng_state(state["rng"][self.processes.rank])', "            pass",
          (UNIT + "test_train_resume.py::test_a_dropout_model_stopped_and_resumed_mid_epoch_equals_the_uninterrupted_run_bitwise",)),
    Break("deterministic-key-ignored", "checkpoint safety", "training/train.py",
          "        distributed.use_deterministic_kernels()", "        pass",
          (UNIT + "test_train_resume.py::test_deterministic_kernels_make_a_resumed_bert_equal_the_straight_run_on_any_device",)),
    Break("checksum-not-verified", "checkpoint safety", "training/checkpoint.py",
          "    if len(data) != expected_bytes or hashlib.sha256(data).hexdigest() != expected_sha:",
          "    if False:",
          (UNIT + "test_checkpoint.py::test_a_truncated_checkpoint_is_skipped_with_a_warning",)),
    Break("checkpoint-loads-any-pickle", "checkpoint safety", "training/checkpoint.py",
          'torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)',
          'torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)',
          (UNIT + "test_checkpoint.py::test_a_crafted_pickle_with_a_valid_checksum_is_refused_and_never_run",)),
    Break("old-checkpoints-kept", "checkpoint safety", "training/checkpoint.py",
          "    for old in candidates(directory)[num_kept:]:", "    for old in candidates(directory)[num_kept + 1:]:",
          (UNIT + "test_checkpoint.py::test_keeps_the_newest_k_and_loads_them_back",)),
    Break("identity-ignores-dataset", "checkpoint safety", "training/loop.py",
          '    return {"train": train, "dataset": dataset, "global_batch"', '    return {"train": train, "dataset": None, "global_batch"',
          (UNIT + "test_train_resume.py::test_a_rebuild_with_the_same_content_resumes_and_another_dataset_starts_fresh",)),
    # Corpus quality: every removal counted by rule, the cap, order before the tokenizer, the keep rule.
    Break("removals-counted-as-sampled", "accounting", "spark_jobs/shard.py",
          "                    counts[rule] += 1\n                    if counts[rule] <= num_samples:",
          "                    if counts[rule] < num_samples:\n                        counts[rule] += 1",
          (SPARK + "test_quality.py::test_a_rule_removing_more_than_the_cap_stops_the_job_and_a_sample_still_counts_all",)),
    Break("removal-cap-off", "refusals", "spark_jobs/quality.py",
          "        if input_records and count / input_records > max_fraction:", "        if False:",
          (SPARK + "test_quality.py::test_a_rule_removing_more_than_the_cap_stops_the_job_and_a_sample_still_counts_all",)),
    Break("tokenizer-trained-on-removed-text", "byte identity", "spark_jobs/preprocess.py",
          "    tokenizer = prepare_tokenizer(config, good.select(read.TEXT), num_kept)",
          "    tokenizer = prepare_tokenizer(config, read.split_rejects(records)[0].select(read.TEXT), num_kept)",
          (SPARK + "test_quality.py::test_rows_carry_the_detected_language_and_the_tokenizer_never_saw_removed_text",)),
    Break("near-duplicate-keeps-the-largest-id", "byte identity", "spark_jobs/near_dedup.py",
          "    nodes = local_checkpoint(named.orderBy(ID, CONTENT_HASH)", "    nodes = local_checkpoint(named.orderBy(F.desc(ID), CONTENT_HASH)",
          (SPARK + "test_near_dedup.py::test_exactly_the_planted_copies_are_removed_for_the_smallest_id",)),
    Break("duplicate-of-names-the-removed-document", "accounting", "spark_jobs/quality.py",
          "    removed = removed.select(clean.CONTENT_HASH, F.col(near_dedup.KEPT_ID).alias(DUPLICATE_OF))",
          "    removed = removed.select(clean.CONTENT_HASH, F.col(clean.CONTENT_HASH).substr(1, 32).alias(DUPLICATE_OF))",
          (SPARK + "test_quality.py::test_each_planted_document_is_removed_by_its_rule_with_what_explains_it",)),
    Break("gopher-word-count-off-by-one", "accounting", "spark_jobs/text_filters.py",
          "    if cfg.min_doc_words is not None and n_non_symbol < cfg.min_doc_words:",
          "    if cfg.min_doc_words is not None and n_non_symbol <= cfg.min_doc_words:",
          (UNIT + "test_text_filters.py",)),
    # Refusals: a wrong dataset, file or config stops with one line before anything runs.
    Break("changed-file-read", "refusals", "training/data.py",
          "    if found.size != file.bytes:", "    if False:",
          (UNIT + "test_reader.py::test_a_changed_data_file_is_refused_naming_it",)),
    Break("flipped-byte-read", "refusals", "training/data.py",
          "    if digest != file.sha256:", "    if False:",
          (UNIT + "test_reader.py::test_a_flipped_byte_stops_the_reader_before_any_row_of_that_file",)),
    Break("old-schema-trained", "refusals", "training/models.py",
          "    if manifest.schema_version not in contract.READABLE_SCHEMA_VERSIONS:", "    if False:",
          (UNIT + "test_models.py",)),
    Break("dataset-of-another-config-reused", "refusals", "spark_jobs/preprocess.py",
          "    if changed:\n        raise DatasetConflictError(", "    if False:\n        raise DatasetConflictError(",
          (SPARK + "test_preprocess.py::test_rerun_skips_and_a_changed_config_is_refused",)),
    Break("stop-with-many-epochs-accepted", "refusals", "pipeline/config.py",
          '        if self.on_exhausted == "stop" and self.epochs > 1:', "        if False:",
          (UNIT + "test_mixture.py::test_the_mixture_config_says_what_is_wrong_in_one_line",)),
)


def run_tests(root: Path, tests: tuple[str, ...], timeout: int) -> tuple[int, float, str]:
    started = time.perf_counter()
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                                cwd=root, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, time.perf_counter() - started, "timed out"
    return result.returncode, time.perf_counter() - started, (result.stdout + result.stderr).strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME", help="run only these breaks")
    parser.add_argument("--list", action="store_true", help="list the breaks and their tests, run nothing")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    args = parser.parse_args()
    chosen = [b for b in BREAKS if args.only is None or b.name in args.only]
    if args.list:
        for b in chosen:
            print(f"{b.name:34} {b.guarantee:18} {b.path}: {', '.join(b.tests)}")
        return 0
    with tempfile.TemporaryDirectory(prefix="shardline-mutants-") as scratch:
        root = Path(scratch)
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
        for b in chosen:  # every break must still apply to the code as committed
            found = (root / b.path).read_text().count(b.old)
            if found != 1:
                print(f"gate error: {b.name}: its line occurs {found} times in {b.path}")
                return 2
        tests = tuple(dict.fromkeys(t for b in chosen for t in b.tests))
        code, seconds, last = run_tests(root, tests, args.timeout * 2)
        print(f"unbroken: {len(tests)} test targets, {last} ({seconds:.0f} s)")
        if code != 0:
            print("gate error: the named tests fail without any break")
            return 2
        caught = 0
        print(f"{'break':34} {'guarantee':18} {'result':11} {'s':>5}  pytest")
        for b in chosen:
            path = root / b.path
            original = path.read_text()
            path.write_text(original.replace(b.old, b.new))
            try:
                code, seconds, last = run_tests(root, b.tests, args.timeout)
            finally:
                path.write_text(original)
            result = "caught" if code == 1 else ("NOT CAUGHT" if code == 0 else f"error {code}")
            caught += code == 1
            print(f"{b.name:34} {b.guarantee:18} {result:11} {seconds:5.0f}  {last}", flush=True)
        print(f"{caught} of {len(chosen)} breaks caught")
        return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
