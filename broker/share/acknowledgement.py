"""Acknowledgements of a share-partition's records (ShareFetch/ShareAcknowledge
``AcknowledgementBatches``; Kafka ``ShareAcknowledgementBatch``, ``AcknowledgeType``).

A batch names offsets ``first_offset..last_offset`` and either one type for all of them or one type
per offset. The types (Kafka ``AcknowledgeType`` ids; 0 is the gap of the ShareFetch schema):

* GAP (0): the offset holds no record the client could deliver; the record is archived;
* ACCEPT (1): processed; the record is acknowledged;
* RELEASE (2): give it back; the record is available again with its delivery count kept (archived
  once that count has reached the delivery-count limit);
* REJECT (3): unprocessable; the record is archived;
* RENEW (4, ShareAcknowledge v2, KIP-1222): keep it; the acquisition lock starts again from now.

Errors are Kafka's: INVALID_REQUEST for a malformed batch, INVALID_RECORD_STATE for offsets the
member does not hold (see :meth:`~.partition.SharePartition.acknowledge`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from sundial.protocol.errors import ErrorCode

from .errors import ShareError
from .state_batch import RecordState


class AcknowledgeType(IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


#: The state each type moves an acquired record to (Kafka ``ACK_TYPE_TO_RECORD_STATE``); RENEW moves none.
TARGET_STATE = {
    AcknowledgeType.GAP: RecordState.ARCHIVED,
    AcknowledgeType.ACCEPT: RecordState.ACKNOWLEDGED,
    AcknowledgeType.RELEASE: RecordState.AVAILABLE,
    AcknowledgeType.REJECT: RecordState.ARCHIVED,
}


@dataclass(frozen=True, slots=True)
class AcknowledgementBatch:
    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]

    def validated_types(self) -> tuple[AcknowledgeType, ...]:
        """The types as :class:`AcknowledgeType`, or INVALID_REQUEST: an unknown type (Kafka
        ``AcknowledgeType.forId`` in ``fetchAckTypeMapForBatch``), an empty or reversed range, or a
        list of per-offset types whose length is not the range's (Kafka refuses those in the
        request checks before the share-partition)."""
        if self.last_offset < self.first_offset or self.first_offset < 0:
            raise ShareError(ErrorCode.INVALID_REQUEST,
                             f"Invalid acknowledgement batch {self.first_offset}-{self.last_offset}")
        count = self.last_offset - self.first_offset + 1
        if len(self.acknowledge_types) not in (1, count):
            raise ShareError(ErrorCode.INVALID_REQUEST,
                             f"{len(self.acknowledge_types)} acknowledge types for {count} offsets")
        try:
            return tuple(AcknowledgeType(t) for t in self.acknowledge_types)
        except ValueError:
            raise ShareError(ErrorCode.INVALID_REQUEST,
                             f"Invalid acknowledge type: {list(self.acknowledge_types)}") from None

    def type_at(self, types: tuple[AcknowledgeType, ...], offset: int) -> AcknowledgeType:
        return types[offset - self.first_offset] if len(types) > 1 else types[0]
