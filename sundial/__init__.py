"""Sundial, a Kafka-compatible broker whose speciality is time: the one top-level name it installs.

The repository keeps one folder per layer; the build maps each under this package
(``setup.py``'s package-dir table), so an installed Sundial adds ``sundial`` (and the
Spark shim ``pyspark_sundial``) to site-packages and nothing else:

* ``sundial.records`` (``records/``) – the record format: batches, codecs, walks;
* ``sundial.protocol`` (``protocol/``) – the wire protocol: framing, headers, schemas;
* ``sundial.storage`` (``storage/``) – the storage engine: segments, indexes, logs;
* ``sundial.config`` (``config/``) – every setting, with Kafka's names and defaults;
* ``sundial.broker`` (``broker/``) – the daemon that wires them;
* ``sundial.tools`` (``tools/``) – the operator tools (clients and offline readers);
* ``sundial.pipeline`` (``pipeline/``) – the Spark data source;
* ``sundial.cli`` – the ``sundial`` command, above the daemon and the tools.
"""
