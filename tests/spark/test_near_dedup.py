import hashlib
import random
import re

import numpy as np
import pytest
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from pipeline.config import NearDedupConfig
from spark_job_names import descriptions_since, last_job_id, near_dedup_phases
from spark_jobs.clean import CONTENT_HASH
from spark_jobs.minhash import MinHasher, jaccard
from spark_jobs.near_dedup import (BUCKET, DST, KEY, REMOVED_COLUMNS, SRC, _KeyIndex, band_rows, candidate_documents,
                                   candidate_pairs, connected_components, local_checkpoint, near_duplicates, pair_ends,
                                   smallest_in_component, with_document_keys)
from spark_jobs.progress import JOB_DESCRIPTION

pytestmark = pytest.mark.spark

CFG = NearDedupConfig()  # FineWeb's: word 5-grams, 14 bands x 8 rows; these graphs' components in one task
IN_ROUNDS = NearDedupConfig(one_task_max_pairs=0)  # the same, components in Spark rounds
HASHER = MinHasher.from_config(CFG)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def share_a_band(a: str, b: str) -> bool:
    keys = HASHER.band_keys(HASHER.signatures([a, b]))
    return bool((keys[0] == keys[1]).any())


@pytest.fixture(scope="module")
def long_texts(docstring_records):
    """Real documents of >= 150 words (consecutive stdlib docstrings joined), no two of which share
    a band key, so that only what a test plants can be a near-duplicate."""
    texts, current = [], []
    for record in docstring_records:
        current.append(record["text"])
        if sum(len(t.split()) for t in current) >= 150:
            texts.append("\n\n".join(current))
            current = []
    seen, distinct = set(), []
    for text, keys in zip(texts, HASHER.band_keys(HASHER.signatures(texts))):
        bands = set(enumerate(keys.tolist()))
        if not bands & seen:
            seen |= bands
            distinct.append(text)
    assert len(distinct) >= 60
    return distinct


def one_word_changed(text: str) -> str:
    words = text.split(" ")
    middle = len(words) // 2
    return " ".join(words[:middle] + ["CHANGED"] + words[middle + 1:])


def chain(texts: list[str]) -> tuple[str, str, str]:
    """A ~ B and B ~ C share a band, A and C do not: windows of 220 words sliding over a long text,
    the first of texts' groups of four (each Python's stdlib docstrings differ) where a shift does."""
    for start in range(0, len(texts) - 3, 4):
        words = " ".join(texts[start:start + 4]).split()
        for shift in range(8, 60):
            a, b, c = (" ".join(words[k * shift:k * shift + 220]) for k in range(3))
            if share_a_band(a, b) and share_a_band(b, c) and not share_a_band(a, c):
                return a, b, c
    raise AssertionError("no shift makes a chain of these texts")


@pytest.fixture(scope="module")
def planted(long_texts):
    """(rows of (id, text), expected removed rows (content_hash, kept_content_hash, kept_id))."""
    base = long_texts[:40]
    rows = [(f"doc-{i:03d}", text) for i, text in enumerate(base)]
    removed = []

    def plant(doc_id: str, text: str, kept_text: str):
        assert share_a_band(text, kept_text), doc_id
        rows.append((doc_id, text))
        removed.append((text, kept_text))

    plant("doc-100", one_word_changed(base[0]), base[0])  # kept: doc-000, the smaller id
    plant("doc-101", base[1] + " This sentence was added to the copy.", base[1])
    # Two copies that differ from each other and from the original by their footers.
    plant("doc-102", base[2] + "\n\nPosted by alice in the forum.", base[2])
    plant("doc-103", base[2] + "\n\nCopyright 2024 the documentation authors.", base[2])
    # A near copy with a smaller id than the original: it is kept, the original removed.
    assert share_a_band(base[4], one_word_changed(base[4]))
    rows.append(("doc-0004", one_word_changed(base[4])))
    removed.append((base[4], one_word_changed(base[4])))
    # Exact copies are one document, with the smallest id: doc-005 and doc-105 are the same text.
    rows.append(("doc-105", base[5]))
    plant("doc-106", one_word_changed(base[5]), base[5])
    # A chain: A ~ B ~ C with A !~ C is one component; A has the smallest id, so C is linked to
    # it only through B (connected components has work to do).
    a, b, c = chain(long_texts[40:])
    rows += [("doc-200", a), ("doc-201", b), ("doc-202", c)]
    removed += [(b, a), (c, a)]
    return rows, [(sha(text), sha(kept), smallest_id(rows, kept)) for text, kept in removed]


def smallest_id(rows, text: str) -> str:
    return min(doc_id for doc_id, row_text in rows if row_text == text)


def frame(spark, rows, num_slices=2):
    data = [(sha(text), doc_id, text) for doc_id, text in rows]
    return spark.createDataFrame(data, "content_hash string, id string, text string").repartition(num_slices)


@pytest.mark.parametrize("cfg", [CFG, IN_ROUNDS], ids=["components in one task", "in rounds"])
def test_exactly_the_planted_copies_are_removed_for_the_smallest_id(spark, planted, cfg):
    rows, removed = planted
    result = near_duplicates(frame(spark, rows), cfg, num_partitions=3)
    assertSchemaEqual(result.schema, REMOVED_COLUMNS)
    assertDataFrameEqual(result, spark.createDataFrame(removed, REMOVED_COLUMNS))


@pytest.mark.parametrize("cfg", [CFG, IN_ROUNDS], ids=["components in one task", "in rounds"])
def test_every_spark_job_is_named_by_its_phase_and_the_callers_name_comes_back(spark, planted, cfg):
    rows, _ = planted
    before = last_job_id(spark)
    spark.sparkContext.setJobDescription("the caller's phase")
    try:
        near_duplicates(frame(spark, rows), cfg, num_partitions=3)  # its result is a plan: no job of the caller's yet
        assert spark.sparkContext.getLocalProperty(JOB_DESCRIPTION) == "the caller's phase"
    finally:
        spark.sparkContext.setLocalProperty(JOB_DESCRIPTION, None)
    phases = list(dict.fromkeys(descriptions_since(spark, before)))  # in order, each once
    if cfg is CFG:
        assert phases == near_dedup_phases(None)
    else:
        assert phases == near_dedup_phases(len(phases) - 3)
        assert len(phases) - 3 >= 2  # star tests: the chain needs a round before its edges are a star


@pytest.mark.parametrize("cfg", [CFG, IN_ROUNDS], ids=["components in one task", "in rounds"])
def test_the_result_does_not_depend_on_partitioning_or_input_order(spark, planted, cfg):
    rows, removed = planted
    shuffled = list(rows)
    random.Random(5).shuffle(shuffled)
    result = near_duplicates(frame(spark, shuffled, num_slices=5), cfg, num_partitions=1)
    assertDataFrameEqual(result, spark.createDataFrame(removed, REMOVED_COLUMNS))


@pytest.mark.parametrize("cfg", [CFG, IN_ROUNDS], ids=["components in one task", "in rounds"])
def test_the_kept_document_is_the_first_in_utf8_byte_order_of_id_then_content_hash(spark, long_texts, cfg):
    """Ids compared by their UTF-8 bytes, as Spark compares strings (not by UTF-16 units, as Java's
    String does: there U+1F600 sorts before U+FF21), and equal ids by content hash."""
    pairs = [(long_texts[50], "\uff21"), (one_word_changed(long_texts[50]), "\U0001f600"),  # U+FF21 first
             (long_texts[51], "z-doc"), (one_word_changed(long_texts[51]), "\u00e9-doc"),  # z (7a) before é (c3 a9)
             (long_texts[52], "same"), (one_word_changed(long_texts[52]), "same")]  # the smaller hash first
    rows, removed = [], []
    for (first, first_id), (second, second_id) in zip(pairs[::2], pairs[1::2]):
        assert share_a_band(first, second)
        rows += [(first_id, first), (second_id, second)]
        kept, gone = sorted([(first_id.encode(), sha(first), first_id), (second_id.encode(), sha(second), second_id)])
        removed.append((gone[1], kept[1], kept[2]))
    rows += [(f"doc-{i}", text) for i, text in enumerate(long_texts[:10])]
    result = near_duplicates(frame(spark, rows), cfg, num_partitions=3)
    assertDataFrameEqual(result, spark.createDataFrame(removed, REMOVED_COLUMNS))


def test_min_jaccard_drops_candidate_pairs_below_it(spark, long_texts):
    close = one_word_changed(long_texts[0])
    far = long_texts[1] + (" This copy was edited: an added sentence, a second one that says nothing new,"
                           " and a footer posted by bob.")
    assert share_a_band(close, long_texts[0]) and share_a_band(far, long_texts[1])
    similarity = {name: jaccard(HASHER.shingle_set(a), HASHER.shingle_set(b))
                  for name, a, b in [("close", close, long_texts[0]), ("far", far, long_texts[1])]}
    threshold = 0.93
    assert similarity["far"] < threshold <= similarity["close"], similarity
    rows = [(f"doc-{i}", t) for i, t in enumerate(long_texts[:10])] + [("doc-x", close), ("doc-y", far)]
    cfg = NearDedupConfig(min_jaccard=threshold)
    result = near_duplicates(frame(spark, rows), cfg, num_partitions=2)
    assertDataFrameEqual(result, spark.createDataFrame([(sha(close), sha(long_texts[0]), "doc-0")], REMOVED_COLUMNS))


def key_of(text: str) -> tuple[int, int]:
    return int(sha(text)[:15], 16), int(sha(text)[15:30], 16)


def test_a_document_key_is_its_content_hash_first_120_bits_and_exact_copies_are_one_document(spark, long_texts):
    rows = [("doc-2", long_texts[0]), ("doc-1", long_texts[0]), ("doc-3", long_texts[1]), ("doc-0", long_texts[2])]
    ends = spark.createDataFrame([key_of(text) for text in long_texts[:2]], ", ".join(f"{k} long" for k in KEY))
    found = candidate_documents(frame(spark, rows), ends).select("id", *KEY, CONTENT_HASH).collect()
    # Only the ends' documents (not doc-0), each once, under the smallest id of its copies.
    expected = {(doc_id, *key_of(text), sha(text)) for doc_id, text in rows[1:3]}
    assert {tuple(row) for row in found} == expected


def shuffled_columns(frame) -> set[str]:
    """The columns that some shuffle (Exchange) of frame's physical plan moves, as "name type"
    (a struct's type names its fields: an aggregate's partial result is a column of its own)."""
    plan = frame._jdf.queryExecution().executedPlan()
    if plan.nodeName().startswith("AdaptiveSparkPlan"):
        plan = plan.executedPlan()  # the plan with its exchanges, as adaptive execution would start it
    found, pending = set(), [plan]
    while pending:
        node = pending.pop()
        if node.nodeName().endswith("Exchange"):
            output = node.output()
            found |= {f"{a.name()} {a.dataType().catalogString()}" for a in map(output.apply, range(output.size()))}
        children = node.children()
        pending += [children.apply(i) for i in range(children.size())]
    return found


def moves_text(frame) -> bool:
    return any(re.search(r"\btext\b", column) for column in shuffled_columns(frame))


def test_the_texts_are_hashed_where_they_are_and_never_shuffled(spark, planted):
    """A corpus is mostly its texts: shuffling them (to find one row per content hash, as near-dedup
    once did, twice) costs about as much as the rest of near-dedup together."""
    rows, _ = planted
    data = spark.sparkContext.parallelize([(sha(text), doc_id, text) for doc_id, text in rows], 3)
    docs = spark.createDataFrame(data, "content_hash string, id string, text string")  # 3 partitions, no shuffle
    pairs = candidate_pairs(band_rows(with_document_keys(docs), CFG), num_partitions=3)
    assert f"{BUCKET} bigint" in shuffled_columns(pairs) and not moves_text(pairs)
    named = candidate_documents(docs, pair_ends(pairs))
    assert f"{CONTENT_HASH} string" in shuffled_columns(named) and not moves_text(named)
    assert moves_text(docs.repartition(2))  # what the check sees when texts move


def test_distinct_and_empty_documents_give_an_empty_result(spark, long_texts):
    rows = [(f"doc-{i}", t) for i, t in enumerate(long_texts[:8])] + [("doc-e1", ""), ("doc-e2", "   ")]
    result = near_duplicates(frame(spark, rows), CFG, num_partitions=2)
    assertSchemaEqual(result.schema, REMOVED_COLUMNS)
    assert result.count() == 0


def union_find(pairs) -> list[tuple[int, int]]:
    """(node, smallest node of its component) for every node of pairs but the smallest, by a plain
    union-find."""
    parent = {}

    def find(node):
        parent.setdefault(node, node)
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for u, v in pairs:
        ru, rv = find(u), find(v)
        parent[max(ru, rv)] = min(ru, rv)
    return [(node, find(node)) for node in parent if find(node) != node]


def random_graph_with_a_long_path(seed: int, num_nodes: int, path: int, extra: int) -> list[tuple[int, int]]:
    """Edges (larger, smaller): a path through `path` + 1 nodes and `extra` random edges among the
    others, node numbers in no relation to the graph's shape."""
    rng = random.Random(seed)
    labels = list(range(1000, 1000 + num_nodes))
    rng.shuffle(labels)
    pairs = [(labels[i], labels[i + 1]) for i in range(path)]
    pairs += [(labels[rng.randrange(path, num_nodes)], labels[rng.randrange(path, num_nodes)]) for _ in range(extra)]
    return [(max(p), min(p)) for p in pairs if p[0] != p[1]]


def test_connected_components_match_union_find_on_a_random_graph_with_a_long_path(spark):
    pairs = random_graph_with_a_long_path(11, 400, 60, 200)
    edges = spark.createDataFrame(pairs, f"{SRC} long, {DST} long")
    result = connected_components(edges)
    assertDataFrameEqual(result, spark.createDataFrame(union_find(pairs), f"{SRC} long, {DST} long"))


def test_the_smallest_node_of_each_component_on_larger_graphs_with_repeated_edges():
    """smallest_in_component, without Spark, on graphs whose paths take many rounds of hooking."""
    for seed, num_nodes, path, extra in ((1, 2, 1, 0), (2, 5_000, 2_000, 1_000), (3, 20_000, 500, 30_000)):
        pairs = random_graph_with_a_long_path(seed, num_nodes, path, extra)
        pairs += pairs[: len(pairs) // 3]  # an edge twice, as candidate pairs from several bands can be
        src, dst = (np.array(column, dtype=np.int64) for column in zip(*pairs))
        nodes, smallest = smallest_in_component(src, dst)
        expected = dict(union_find(pairs))
        assert nodes.tolist() == sorted({n for pair in pairs for n in pair})
        assert {n: s for n, s in zip(nodes.tolist(), smallest.tolist()) if n != s} == expected


def test_a_key_is_found_among_others_that_share_its_first_half():
    """_KeyIndex, without Spark: keys that share key_hi (2^-60 a pair of real documents) are told
    apart by key_lo; a key that is not there is an error, not some other document's row."""
    rng = np.random.default_rng(3)
    keys = np.column_stack([rng.integers(1, 1 << 60, 2_000), rng.integers(1, 1 << 60, 2_000)])
    keys[100:110, 0] = keys[5, 0]  # eleven keys share one key_hi, two runs share another
    keys[200:203, 0] = keys[6, 0]
    keys[-1, 0] = keys[:, 0].max()  # and the largest key_hi twice
    keys[-2, 0] = keys[-1, 0]
    find = _KeyIndex(keys)
    queries = rng.permutation(len(keys))
    assert find(keys[queries, 0], keys[queries, 1]).tolist() == queries.tolist()
    for hi, lo in ((keys[5, 0], 7), (keys[-1, 0], 1 << 61), (keys[0, 0] + 1, keys[0, 1])):
        with pytest.raises(KeyError):
            find(np.array([keys[9, 0], hi]), np.array([keys[9, 1], lo]))


def test_a_local_checkpoint_keeps_its_rows_on_disk_and_none_in_the_executor_heap(spark):
    """Rows checkpointed in memory are live heap objects, more of them the bigger the corpus (a
    standalone executor's heap after a collection: 279 MB at GCIDE x1, 727 MB at x4); on disk they
    cost the heap nothing."""
    storage_info = spark.sparkContext._jsc.sc().getRDDStorageInfo  # the RDDs with blocks kept, as the UI lists them
    before = {info.id() for info in storage_info()}
    frame = local_checkpoint(spark.range(20_000, numPartitions=4).selectExpr("id", "sha2(CAST(id AS STRING), 256) AS pad"))
    kept = [info for info in storage_info() if info.id() not in before]
    assert [(info.numCachedPartitions(), info.memSize()) for info in kept] == [(4, 0)]
    assert kept[0].diskSize() > 20_000 * 32  # 64 hex digits a row, compressed
    assert frame.count() == 20_000 and frame.where("id = 19999").count() == 1
