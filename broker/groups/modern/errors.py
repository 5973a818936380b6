"""The one exception of the consumer-group state machine: a refusal with Kafka's error code.

The manager raises :class:`GroupError` for every request it refuses; the handler turns it into
the response's ``ErrorCode`` and ``ErrorMessage`` (Kafka: an ``ApiException`` caught by
``GroupCoordinatorService`` and mapped through ``Errors.forException``). Nothing is changed by a
refused request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from sundial.protocol.errors import ErrorCode

G = TypeVar("G")


class GroupError(Exception):
    """A request refused with ``error_code`` (a Kafka error code) and a message for the client."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = ErrorCode(error_code)
        self.message = message

    def __repr__(self) -> str:
        return f"GroupError({self.error_code.name}, {self.message!r})"


def heartbeat_group(groups: Mapping[str, G], group_id: str, *, kind: str, other_type: bool, joining: bool,
                    new: Callable[[str], G]) -> G:
    """The group of ``kind`` ("consumer", "share") a heartbeat names: refused with GROUP_ID_NOT_FOUND when
    the id is a group of another type (``other_type``), or unknown and the member is not joining; a new
    group (``new(group_id)``, not yet in ``groups``) for a joining member's unknown id."""
    if other_type:
        raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a {kind} group.")
    group = groups.get(group_id)
    if group is None:
        if not joining:
            raise GroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"{kind.capitalize()} group {group_id} not found.")
        group = new(group_id)
    return group
