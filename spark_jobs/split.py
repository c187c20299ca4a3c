"""Label ids and the train/val/test split, as pure DataFrame -> DataFrame functions."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import contract
from pipeline.config import SplitConfig

SPLIT = "split"
_BUCKETS = 1_000_000  # split resolution: fractions are honoured to 1e-6


def with_label_ids(df: DataFrame, label_map: dict[str, int], label_raw: str = "label_raw") -> DataFrame:
    """Map label strings to ids; a label outside the map gets null (the caller rejects it)."""
    mapping = F.create_map(*[item for name, index in sorted(label_map.items()) for item in (F.lit(name), F.lit(index))])
    return df.withColumn(contract.LABEL, mapping[F.trim(F.col(label_raw))].cast("int"))


def with_split(df: DataFrame, fractions: SplitConfig, seed: int) -> DataFrame:
    """Assign each row to train/val/test by a seeded hash of its id: the same id always lands in the
    same split, whatever else is in the corpus."""
    bucket = F.pmod(F.xxhash64(F.col(contract.ID_COLUMN), F.lit(seed)), F.lit(_BUCKETS))
    train_end = round(fractions.train * _BUCKETS)
    val_end = train_end + round(fractions.val * _BUCKETS)
    return df.withColumn(
        SPLIT,
        F.when(bucket < train_end, F.lit("train")).when(bucket < val_end, F.lit("val")).otherwise(F.lit("test")),
    )
