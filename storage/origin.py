"""Where an append comes from, and so how much of it the log checks (Kafka's AppendOrigin).

The one home of the append origins: :meth:`storage.PartitionLog.append`, the validator and
the producer state take an :class:`AppendOrigin`, never a string.
"""

from enum import Enum


class AppendOrigin(Enum):
    """The source of a log append; each member documents the checks it gets."""

    #: A Produce request: full validation. The batches' base offset must be 0, offsets are
    #: assigned by the log, a retried idempotent batch is answered as a duplicate, and the
    #: producer epoch and sequence are checked.
    CLIENT = "client"
    #: The group or transaction coordinator writing its own records or a COMMIT/ABORT marker:
    #: offsets are assigned, record rules apply, and a marker's producer and coordinator epochs
    #: are checked (a stale one fails the append). Producer sequences are not checked.
    COORDINATOR = "coordinator"
    #: A follower copying the leader's batches: offsets kept, minimal checks; a marker with a
    #: stale producer or coordinator epoch is logged and kept, as the leader already took it.
    REPLICATION = "replication"


__all__ = ["AppendOrigin"]
