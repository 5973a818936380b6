"""One local[2] SparkSession for a test module (pyspark + Java), skipped with the reason when either is missing."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
_ENV_KEYS = ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")


def java_problem() -> str | None:
    java = shutil.which("java") or (os.path.join(os.environ["JAVA_HOME"], "bin", "java")
                                    if os.environ.get("JAVA_HOME") else None)
    if not java or not os.path.exists(java):
        return "no Java runtime (install openjdk-17-jre-headless or set JAVA_HOME)"
    try:
        subprocess.run([java, "-version"], capture_output=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java -version failed: {exc}"
    return None


@contextlib.contextmanager
def local_spark(app_name: str, **conf):
    """A local[2] session with the workers on this interpreter and the repository on their path."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'sundial-broker[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'sundial-broker[spark]')")
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed (pip install 'sundial-broker[spark]')")
    problem = java_problem()
    if problem:
        pytest.skip(problem)
    saved = {k: os.environ.get(k) for k in _ENV_KEYS}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # the workers must see the repository (editable installs hide top-level modules from
    # pkgutil, which is how Spark finds pyspark_sundial)
    paths = [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.bindAddress", "127.0.0.1"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
