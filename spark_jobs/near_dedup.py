"""Near-duplicate removal: MinHash LSH over bands x rows, then connected components, all in Spark.

Pure DataFrame -> DataFrame transforms; `near_duplicates` is the entry. The steps:

1. each document's key: two longs, the first 120 bits of its content hash (sha256) in two 60-bit
   halves, so exact copies are one document. Only keys travel through the big shuffles below
   (num_bands rows a document), not the 64-character hash and the id: on GCIDE x4 the band rows
   shuffled 521 MB as strings, 207 MB as keys, 182 MB with one long a bucket (step 2). Two distinct
   documents share a key with probability 2^-120 per pair (4e-19 among 10^9 documents), and
   sha256 gives no way to make them;
2. MinHash signatures and band keys on the executors (`mapInArrow`, spark_jobs.minhash), in the
   tasks that hold the text, exploded to (document key, bucket): a bucket is one long for the
   band's index and key (on GCIDE x4 sorting one long instead of (band, band key) cut the bucket
   stage's JVM CPU from 10.0-10.7 s to 5.5-7.2 s); a document without shingles gets no bands. The
   text itself is never shuffled here: an exact copy in another task is hashed again and gives the
   same rows, which make no pair;
3. each bucket of two or more documents gives star edges from every member to the
   bucket's smallest document key - bands x rows as text-dedup's minhash_spark.py does it, since
   Spark ML's MinHashLSH has only OR-amplification;
4. with cfg.min_jaccard, each candidate edge is kept only when the true Jaccard similarity of its
   two documents' shingle sets reaches it. A member is checked against its bucket's smallest key
   only, so a member similar to another member but not to that one loses this bucket's link (it
   is usually linked through another band);
5. the documents that have an edge (their smallest id among exact copies, found by joining every
   document's id and hash to the edges' ends and grouping only what joined) are numbered in
   (id, content_hash) order (a sort, then monotonically_increasing_id, which grows with the sort),
   so the smallest number of a component is the document kept; connected components by
   alternating large-star and small-star (Kiveris et al. 2014, "Connected Components in MapReduce
   and Beyond"), which converges in O(log^2 n) rounds
   (in practice a few: 4 for a random graph of 400 nodes holding a 61-node path); the loop stops
   at ceil(log2(2 * edges + 2))^2 rounds with an error. A round is three shuffles of edges (two
   longs each), local-checkpointed so lineage stays one round long, then one small action checks
   whether the edges already form stars around their smallest node, which is exactly the answer.
   Nothing but that boolean (and one count of edges) reaches the driver;
6. instead of step 5, with at most cfg.one_task_max_pairs candidate pairs (a count of the
   checkpointed pairs), the pairs and their documents (key, smallest id, content hash) go to one
   executor task (removed_in_one_task), which numbers the documents in the same order, finds the
   components in numpy (smallest_in_component) and names each removed document's kept one: on a
   graph that small, Spark's cost per job is most of what the sort, the joins and the rounds
   take, and the answer is the same.

Local checkpoints live on the executors' local disks (`local_checkpoint`): losing one mid-job fails
the job (rerun it), as with any localCheckpoint; a big bucket (or component) is one window
partition, which Spark spills to disk.

The result depends only on the set of documents: which document is kept, and every number, are
decided by the (id, content_hash) order, never by partitioning or input order.

The Spark UI names each phase's jobs ("near-dedup: connected components, star test and round 2"),
not their call sites (`localCheckpoint at NativeMethodAccessorImpl.java:0`): spark_jobs.progress.described.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import contract
from pipeline.config import NearDedupConfig
from spark_jobs.clean import CONTENT_HASH
from spark_jobs.minhash import EMPTY, MinHasher, fmix64, jaccard
from spark_jobs.progress import described
from spark_jobs.read import TEXT

ID = contract.ID_COLUMN
KEPT_CONTENT_HASH = "kept_content_hash"  # the content hash of the document kept from the component
KEPT_ID = "kept_id"  # its id
# Never null in fact, but nullable as Spark infers the join keys (content_hash is nullable upstream).
REMOVED_COLUMNS = T.StructType([
    T.StructField(CONTENT_HASH, T.StringType()),
    T.StructField(KEPT_CONTENT_HASH, T.StringType()),
    T.StructField(KEPT_ID, T.StringType()),
])

KEY = ("_key_hi", "_key_lo")  # longs: a distinct document's key (its content hash's first 2 x 15 hex digits)
ROOT = ("_root_hi", "_root_lo")  # the key of the bucket's smallest document, an edge's other end
# long: the band's index and the hash of its rows_per_band signature values in one. Spark sorts one
# long by its sort prefix alone; sorting (band, band key), the prefix is the band, and the rows of
# a band are compared field by field. Two different bands share a bucket with probability 2^-64,
# as two band keys do.
BUCKET = "_bucket"
SRC, DST = "_src", "_dst"  # an edge between two numbered documents, always SRC > DST
_NODE = "_node"
_BAND_SCHEMA = T.StructType([T.StructField(name, T.LongType(), False) for name in (*KEY, BUCKET)])
_BAND_ARROW_SCHEMA = pa.schema([pa.field(name, pa.int64(), False) for name in (*KEY, BUCKET)])
_PAIR_COLUMNS = [*KEY, *ROOT]
_ONE_TASK_BATCH_ROWS = 10_000  # removals the one-task path yields at a time


def near_duplicates(docs: DataFrame, cfg: NearDedupConfig, num_partitions: int) -> DataFrame:
    """docs: columns content_hash (string: text's sha256, in hex), id (string), text (string);
    may hold several rows per content_hash (exact copies). Returns one row per content_hash to
    remove: every member of a near-duplicate component except the kept one, the one with the
    smallest (id, content_hash). Columns: content_hash, kept_content_hash and kept_id (the component's
    kept document; its id is the smallest of its content hash's rows).

    Runs Spark jobs before it returns (the candidate pairs, their numbering and each round of
    connected components are local checkpoints); the frame returned joins those back to hashes,
    or, for a graph of at most cfg.one_task_max_pairs pairs, is the one task's checkpointed answer."""
    spark_context = docs.sparkSession.sparkContext
    keyed = with_document_keys(docs)
    pairs = candidate_pairs(band_rows(keyed, cfg), num_partitions)
    if cfg.min_jaccard is not None:
        pairs = verified_pairs(pairs, keyed, cfg)
    # Few rows (candidates only), read twice below: computed once, signatures and all.
    with described(spark_context, "near-dedup: MinHash signatures and candidate pairs"):
        pairs = local_checkpoint(pairs)
        in_one_task = pairs.count() <= cfg.one_task_max_pairs  # as many edges or fewer
    if in_one_task:
        with described(spark_context, "near-dedup: connected components in one task"):
            return local_checkpoint(removed_in_one_task(pairs, candidate_documents(docs, pair_ends(pairs))))
    with described(spark_context, "near-dedup: candidates numbered in (id, content_hash) order"):
        nodes, edges = numbered_edges(pairs, docs)
    stars = connected_components(edges)
    removed = (
        stars.join(nodes.select(F.col(_NODE).alias(SRC), CONTENT_HASH), SRC)
        .join(nodes.select(F.col(_NODE).alias(DST), F.col(CONTENT_HASH).alias(KEPT_CONTENT_HASH),
                           F.col(ID).alias(KEPT_ID)), DST)
        .select(CONTENT_HASH, KEPT_CONTENT_HASH, KEPT_ID)
    )
    return removed.to(REMOVED_COLUMNS)


def with_document_keys(docs: DataFrame) -> DataFrame:
    """docs with key_hi and key_lo, from content_hash: 15 hex digits each, 60 bits, always a
    positive long. No shuffle."""
    return docs.select("*", *(F.conv(F.substring(CONTENT_HASH, 1 + 15 * half, 15), 16, 10).cast("long").alias(name)
                              for half, name in enumerate(KEY)))


def candidate_documents(docs: DataFrame, ends: DataFrame) -> DataFrame:
    """(key_hi, key_lo, id, content_hash), one row per document of docs (content_hash, id; exact
    copies allowed) whose key is among ends (key_hi, key_lo): its smallest id. Joined before it is
    grouped, so only candidates are grouped, with no shuffle of their own after a shuffled join on
    the same key; every document's hash and id (never its text) is shuffled once, or not at all when
    the ends are few enough to broadcast."""
    keyed = with_document_keys(docs.select(CONTENT_HASH, ID))
    return (keyed.join(ends, list(KEY), "left_semi")
            .groupBy(*KEY).agg(F.min(ID).alias(ID), F.min(CONTENT_HASH).alias(CONTENT_HASH)))


def band_rows(docs: DataFrame, cfg: NearDedupConfig) -> DataFrame:
    """(key_hi, key_lo, bucket): num_bands rows per document with shingles, none without."""
    hasher = MinHasher.from_config(cfg)
    band_seeds = fmix64(np.arange(1, hasher.num_bands + 1, dtype=np.uint64))  # distinct per band
    hi, lo, text = 0, 1, 2  # the columns of the frame mapped below

    def bands(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            signatures = hasher.signatures(batch.column(text).to_pylist())
            buckets = (hasher.band_keys(signatures).view(np.uint64) ^ band_seeds).view(np.int64)
            has_shingles = np.flatnonzero(np.any(signatures != EMPTY, axis=1))
            rows = pa.array(np.repeat(has_shingles, hasher.num_bands))
            yield pa.RecordBatch.from_arrays([
                batch.column(hi).take(rows),
                batch.column(lo).take(rows),
                pa.array(buckets[has_shingles].reshape(-1)),
            ], schema=_BAND_ARROW_SCHEMA)

    return docs.select(*KEY, TEXT).mapInArrow(bands, _BAND_SCHEMA)


def candidate_pairs(bands: DataFrame, num_partitions: int) -> DataFrame:
    """(key_hi, key_lo, root_hi, root_lo): every document of a bucket of two or more, with the
    bucket's smallest document key as its root; each pair once. One shuffle for the buckets."""
    root = F.min(F.struct(*KEY)).over(Window.partitionBy(BUCKET))
    members = bands.repartition(num_partitions, BUCKET).withColumn("_root", root)
    pairs = members.where(F.struct(*KEY) != F.col("_root"))
    return pairs.select(*KEY, *(F.col(f"_root.{k}").alias(r) for k, r in zip(KEY, ROOT))).distinct()


def verified_pairs(pairs: DataFrame, docs: DataFrame, cfg: NearDedupConfig) -> DataFrame:
    """The pairs whose two documents' shingle sets have a Jaccard similarity of at least
    cfg.min_jaccard (docs: key_hi, key_lo and text, exact copies allowed)."""
    hasher, threshold = MinHasher.from_config(cfg), cfg.min_jaccard
    texts = docs.select(*KEY, TEXT).dropDuplicates(list(KEY))  # docs may hold exact copies
    root_texts = texts.select(*(F.col(k).alias(r) for k, r in zip(KEY, ROOT)), F.col(TEXT).alias("_root_text"))
    joined = pairs.join(texts, list(KEY)).join(root_texts, list(ROOT)).select(*_PAIR_COLUMNS, TEXT, "_root_text")
    schema = T.StructType([T.StructField(name, T.LongType(), False) for name in _PAIR_COLUMNS])

    def similar(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            texts, roots = batch.column(4).to_pylist(), batch.column(5).to_pylist()
            keep = [jaccard(hasher.shingle_set(a), hasher.shingle_set(b)) >= threshold for a, b in zip(texts, roots)]
            yield pa.RecordBatch.from_arrays(batch.columns[:4], names=_PAIR_COLUMNS).filter(pa.array(keep, pa.bool_()))

    return joined.mapInArrow(similar, schema)


def numbered_edges(pairs: DataFrame, docs: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(nodes: content_hash, id, _node, keys; edges: _src, _dst): every document of a pair numbered
    in (id, content_hash) order (docs: content_hash and id, for the ids and hashes of the keys), and
    the pairs as numbers, the larger first. The numbers are pinned by a local checkpoint:
    monotonically_increasing_id must not be recomputed on another layout."""
    named = candidate_documents(docs, pair_ends(pairs))
    nodes = local_checkpoint(named.orderBy(ID, CONTENT_HASH).withColumn(_NODE, F.monotonically_increasing_id()))
    edges = (pairs.join(nodes.select(*KEY, F.col(_NODE).alias("_a")), list(KEY))
             .join(nodes.select(*(F.col(k).alias(r) for k, r in zip(KEY, ROOT)), F.col(_NODE).alias("_b")), list(ROOT))
             .select(F.greatest("_a", "_b").alias(SRC), F.least("_a", "_b").alias(DST)))
    return nodes, edges


def pair_ends(pairs: DataFrame) -> DataFrame:
    """(key_hi, key_lo) of every document in a pair, once."""
    return pairs.select(*KEY).union(pairs.select(*(F.col(r).alias(k) for k, r in zip(KEY, ROOT)))).distinct()


def local_checkpoint(frame: DataFrame) -> DataFrame:
    """frame computed now and kept on the executors, its lineage cut, on their local disks only
    (Spark 4.x and 3.5 alike). Kept in memory, Spark's default, the checkpointed rows are
    live objects in the executor's heap, and there are more of them the bigger the corpus: on a
    standalone executor (Spark 4.3, 1 GB heap, every quality rule on) its heap after a collection
    went from 279 MB at GCIDE x1 to 727 MB at x4 with them in memory, from 282 to 332 MB on disk."""
    if "storageLevel" in inspect.signature(frame.localCheckpoint).parameters:
        return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.DISK_ONLY)
    # Spark 3.5's localCheckpoint takes no storage level and would keep the rows in memory too. The
    # rows it checkpoints are the RDD under the plan it returns: persisting that RDD on disk before it
    # is computed overrides the level (RDD.persist after localCheckpoint, adapted to use disk).
    checkpointed = frame.localCheckpoint(eager=False)
    rows = checkpointed._jdf.queryExecution().logical().rdd()  # a LogicalRDD's rows
    rows.persist(frame.sparkSession._jvm.org.apache.spark.storage.StorageLevel.DISK_ONLY())
    rows.count()
    return checkpointed


def connected_components(edges: DataFrame) -> DataFrame:
    """(_src, _dst) edges, SRC > DST -> one edge (node, smallest node of its component) for every
    node but the smallest: alternates large-star and small-star until the edges are such stars;
    raises after ceil(log2(nodes + 2))^2 rounds (the O(log^2 n) bound), which means a bug."""
    spark_context = edges.sparkSession.sparkContext
    # One shuffle; adaptive execution sizes its partitions, as it does each round's, by the edges'
    # bytes (16 an edge). The corpus's count (46 at GCIDE x4, for 570k edges) made every round's
    # map stages read dozens of tiny partitions.
    with described(spark_context, "near-dedup: connected components, edges between the numbered candidates"):
        edges = local_checkpoint(edges.distinct())
        max_rounds = math.ceil(math.log2(2 * edges.count() + 2)) ** 2  # at most 2 nodes per edge
    for done in range(max_rounds + 1):
        with described(spark_context, f"near-dedup: connected components, star test and round {done + 1}"):
            if _is_star_forest(edges):
                return edges
            if done < max_rounds:
                edges = local_checkpoint(_small_star(_large_star(edges)))
    raise RuntimeError(f"connected components did not converge in {max_rounds} large-star/small-star rounds")


def removed_in_one_task(pairs: DataFrame, candidates: DataFrame) -> DataFrame:
    """REMOVED_COLUMNS, as the numbering and the rounds give them, from the candidate pairs (key_hi,
    key_lo, root_hi, root_lo) and the candidate documents (key_hi, key_lo, id, content_hash;
    candidate_documents), both in one executor task: for a graph small enough that Spark's cost per
    job is most of the distributed way's (GCIDE x4, 570k pairs: the sort that numbers the candidates,
    the joins of the pairs to those numbers and of the components back to hashes, and three rounds
    with their star tests). The task numbers the candidates in (id, content_hash) order, comparing
    strings by their UTF-8 bytes as Spark does, and finds the components (smallest_in_component)."""
    def null(kind: str):
        return F.lit(None).cast(kind)

    both = pairs.select(*KEY, *ROOT, null("string").alias(ID), null("string").alias(CONTENT_HASH)).unionByName(
        candidates.select(*KEY, *(null("long").alias(name) for name in ROOT), ID, CONTENT_HASH))
    return both.repartition(1).mapInArrow(_removed_in_one_task, REMOVED_COLUMNS)


def _removed_in_one_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The pairs and the candidate documents of the whole graph (removed_in_one_task's rows: a
    pair has a root, a document an id) -> REMOVED_COLUMNS. Kept as numpy keys and the documents'
    ids and hashes only: no copy of the rows as they came."""
    pair_keys, doc_keys, doc_names = [], [], []
    for batch in batches:
        is_pair = batch.column(2).is_valid()  # ROOT[0]
        pairs, docs = batch.filter(is_pair), batch.filter(pc.invert(is_pair))
        pair_keys.append(np.column_stack([pairs.column(i).to_numpy() for i in range(4)]))  # KEY, ROOT
        doc_keys.append(np.column_stack([docs.column(i).to_numpy() for i in range(2)]))  # KEY
        doc_names.append(pa.record_batch([docs.column(4), docs.column(5)], names=[ID, CONTENT_HASH]))
    if not doc_names:
        return
    ids, hashes = (pa.concat_arrays([names.column(i) for names in doc_names]) for i in (0, 1))  # one chunk each: take is fast
    del doc_names
    docs = pa.table([ids, hashes], names=[ID, CONTENT_HASH])
    # A document's number is its place in (id, content_hash) order, as numbered_edges numbers it.
    order = pc.sort_indices(docs, sort_keys=[(ID, "ascending"), (CONTENT_HASH, "ascending")]).to_numpy()
    number = np.empty_like(order)
    number[order] = np.arange(len(order))
    find = _KeyIndex(np.concatenate(doc_keys))
    del doc_keys
    pairs = np.concatenate(pair_keys)
    del pair_keys
    a = number[find(pairs[:, 0], pairs[:, 1])]
    b = number[find(pairs[:, 2], pairs[:, 3])]
    del pairs, number, find
    nodes, smallest = smallest_in_component(np.maximum(a, b), np.minimum(a, b))
    linked = np.flatnonzero(nodes != smallest)
    removed, kept = order[nodes[linked]], order[smallest[linked]]  # rows of docs
    del nodes, smallest, linked
    for begin in range(0, len(removed), _ONE_TASK_BATCH_ROWS):  # a batch of strings at a time, not all
        rows = pa.array(removed[begin:begin + _ONE_TASK_BATCH_ROWS])
        kept_rows = pa.array(kept[begin:begin + _ONE_TASK_BATCH_ROWS])
        yield pa.RecordBatch.from_arrays([hashes.take(rows), hashes.take(kept_rows), ids.take(kept_rows)],
                                         names=REMOVED_COLUMNS.fieldNames())


class _KeyIndex:
    """The row of each document key (key_hi, key_lo) among distinct keys (n, 2), by binary search on
    the keys sorted: numpy has no 128-bit integer, so the search is on key_hi, and the rare run of
    keys sharing a key_hi (2^-60 a pair of documents) is searched on key_lo."""

    def __init__(self, keys: np.ndarray):
        self.rows = np.lexsort((keys[:, 1], keys[:, 0]))
        self.hi, self.lo = keys[self.rows, 0], keys[self.rows, 1]

    def __call__(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        found = np.minimum(np.searchsorted(self.hi, hi), len(self.hi) - 1)  # the first key with this key_hi
        for i in np.flatnonzero(self.lo[found] != lo):  # another key has this key_hi too, or none has
            end = np.searchsorted(self.hi, hi[i], "right")
            found[i] = min(found[i] + np.searchsorted(self.lo[found[i]:end], lo[i]), len(self.hi) - 1)
        if not (np.array_equal(self.hi[found], hi) and np.array_equal(self.lo[found], lo)):
            raise KeyError("a pair's end is not among the candidate documents")
        return self.rows[found]


def smallest_in_component(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every node of the edges src[i] - dst[i], ascending; the smallest node of its component).

    Each node points at a smaller node of its component, or at itself (a root): each round hooks
    the larger root of every edge whose ends have different roots onto the smaller one, then
    points every node straight at its root. Roots only get fewer, and when the two ends of every
    edge share a root each component has one root, which is its smallest node (that node can
    point at nothing smaller). Vectorised: a round is a few passes over the edges in numpy."""
    nodes, ends = np.unique(np.concatenate([src, dst]), return_inverse=True)
    ends = ends.reshape(-1)  # numpy 2.0 and 2.1 shape return_inverse like the input
    u, v = ends[:len(src)], ends[len(src):]
    parent = np.arange(len(nodes))  # node indices, in the order of the nodes
    while True:
        root_u, root_v = parent[u], parent[v]
        apart = root_u != root_v
        if not apart.any():
            return nodes, nodes[parent]
        np.minimum.at(parent, np.maximum(root_u[apart], root_v[apart]), np.minimum(root_u[apart], root_v[apart]))
        while True:  # each node straight at its root: parent[parent] until nothing moves
            grandparent = parent[parent]
            if np.array_equal(grandparent, parent):
                break
            parent = grandparent


def _large_star(edges: DataFrame) -> DataFrame:
    """Each node links its larger neighbours to the smallest of its neighbourhood and itself.
    One shuffle (a window per node); not made distinct: small-star's distinct removes repeats."""
    both = edges.select(F.col(SRC).alias("_u"), F.col(DST).alias("_v")).union(
        edges.select(F.col(DST).alias("_u"), F.col(SRC).alias("_v")))
    smallest = F.least(F.min("_v").over(Window.partitionBy("_u")), F.col("_u"))
    return both.withColumn("_m", smallest).where(F.col("_v") > F.col("_u")).select(
        F.col("_v").alias(SRC), F.col("_m").alias(DST))


def _small_star(edges: DataFrame) -> DataFrame:
    """Each node links itself and its smaller neighbours to the smallest of them. Two shuffles (a
    window per node, then distinct)."""
    with_smallest = edges.withColumn("_m", F.min(DST).over(Window.partitionBy(SRC)))
    neighbours = with_smallest.where(F.col(DST) != F.col("_m")).select(F.col(DST).alias(SRC), F.col("_m").alias(DST))
    itself = with_smallest.select(SRC, F.col("_m").alias(DST))
    return neighbours.union(itself).distinct()


def _is_star_forest(edges: DataFrame) -> bool:
    """Every node has at most one edge to a smaller node, and no such smaller node has one itself:
    each component is a star around its smallest node (SRC > DST). One shuffle, one small action."""
    ends = edges.select(F.col(SRC).alias("_n"), F.lit(1).alias("_up")).union(
        edges.select(F.col(DST).alias("_n"), F.lit(0).alias("_up")))
    roles = ends.groupBy("_n").agg(F.sum("_up").alias("_ups"), F.count(F.lit(1)).alias("_edges"))
    return roles.where((F.col("_ups") > 1) | ((F.col("_ups") == 1) & (F.col("_edges") > 1))).isEmpty()
