"""The one exception of the share-partition engine: a refusal with Kafka's error code.

:meth:`~.partition.SharePartition.acknowledge` raises :class:`ShareError` for acknowledgements it
refuses (INVALID_REQUEST, INVALID_RECORD_STATE), having changed nothing; the handler puts the code
in the partition's ``AcknowledgeErrorCode`` (Kafka: an ``ApiException`` mapped by
``Errors.forException``).
"""

from __future__ import annotations

from sundial.protocol.errors import ErrorCode


class ShareError(Exception):
    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = ErrorCode(error_code)
        self.message = message

    def __repr__(self) -> str:
        return f"ShareError({self.error_code.name}, {self.message!r})"
