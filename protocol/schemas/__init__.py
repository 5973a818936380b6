"""Apache Kafka 4.2's JSON message schemas for the APIs kafka-python 3.0.12 does not ship.

``protocol.schema_codec`` loads these files through kafka-python's own schema machinery
(``ApiMessage`` with ``load_json=`` this package), exactly as kafka-python loads the
schemas it bundles, so they decode and encode with the same generated code. Each file
reproduces Kafka's ``clients/src/main/resources/common/message/<Name>.json`` as of release 4.2
(data, under the Apache License 2.0 header it carries): consumer groups (KIP-848) ConsumerGroupHeartbeat
(68) and ConsumerGroupDescribe (69); share groups (KIP-932) ShareGroupHeartbeat (76),
ShareGroupDescribe (77), ShareFetch (78), ShareAcknowledge (79), DescribeShareGroupOffsets
(90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92).

Field names, types, versions, nullability and defaults are what the wire depends on; they
were checked field by field against two independent descriptions of Kafka 4.2's protocol
(franz-go's ``generate/definitions/68``, ``69``, ``76``–``79``, ``90``–``92`` and a Go code
generator's output from Kafka's JSON). The ``about`` texts and comments follow Kafka's files
but may differ from 4.2's wording in places; they do not reach the wire. The tests in
``tests/unit/protocol/test_kafka4_groups.py`` build the expected bytes of every version by
hand from this layout, and ``test_kafka4_client_capture.py`` runs confluent-kafka's consumer
(``group.protocol=consumer``) and share consumer against them.
"""
