"""Auto-registration shim: Spark imports top-level ``pyspark_*`` modules and registers ``DefaultSource``.

Having this module installed makes ``spark.read.format("sundial")`` work without
``spark.dataSource.register``. The data source itself lives in :mod:`pipeline`.
"""

try:  # pyspark is an optional extra; importing this module must never fail without it
    from pipeline.source import SundialDataSource as DefaultSource  # noqa: F401
except ImportError:  # pragma: no cover - pyspark not installed
    DefaultSource = None  # type: ignore[assignment]
