"""The one exception of the consumer-group state machine: a refusal with Kafka's error code.

The manager raises :class:`GroupError` for every request it refuses; the handler turns it into
the response's ``ErrorCode`` and ``ErrorMessage`` (Kafka: an ``ApiException`` caught by
``GroupCoordinatorService`` and mapped through ``Errors.forException``). Nothing is changed by a
refused request.
"""

from __future__ import annotations

from sundial.protocol.errors import ErrorCode


class GroupError(Exception):
    """A request refused with ``error_code`` (a Kafka error code) and a message for the client."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = ErrorCode(error_code)
        self.message = message

    def __repr__(self) -> str:
        return f"GroupError({self.error_code.name}, {self.message!r})"
