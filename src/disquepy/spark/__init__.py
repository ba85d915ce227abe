"""PySpark connector for disquepy: the ``"disque"`` data source and queue analytics.

>>> from disquepy.spark import register
>>> register(spark)
>>> df.write.format("disque").option("nodes", "127.0.0.1:7711").option("queue", "q").save()

See :mod:`disquepy.spark.source` for the guarantees and the options, and
:mod:`disquepy.spark.analytics` for the event-log analytics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .source import DisqueDataSource, WriteReport

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["DisqueDataSource", "WriteReport", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``"disque"`` format on a SparkSession."""
    spark.dataSource.register(DisqueDataSource)
