"""Auto-registration shim: Spark imports top-level ``pyspark_*`` modules and registers ``DefaultSource``.

With the package installed (``pip install 'sundial-broker[spark]'``),
``spark.read.format("sundial")`` works without ``spark.dataSource.register``: when a
session first resolves a Python data source, Spark scans the workers' module path for
modules named ``pyspark_*`` and registers each one's ``DefaultSource`` under its
``name()``. The data source itself lives in :mod:`pipeline.source`.

Without pyspark (or pyarrow) installed this module defines no ``DefaultSource`` at all:
Spark's scan checks ``issubclass(DefaultSource, DataSource)`` and a ``None`` there would
break the lookup of every other data source.
"""

try:  # pyspark is an optional extra; importing this module must never fail without it
    from sundial.pipeline.source import SundialDataSource as DefaultSource  # noqa: F401
except ImportError:  # pragma: no cover - pyspark not installed
    pass
