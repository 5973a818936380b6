"""ConsumerGroupHeartbeat as the state machine sees it: the request, the answer, the checks.

:class:`HeartbeatRequest` carries the fields of ConsumerGroupHeartbeat v0-v1 (Kafka
``ConsumerGroupHeartbeatRequest.json``), "null if unchanged" fields as None, owned partitions
by topic id. :func:`validate` refuses what Kafka's ``GroupCoordinatorService`` refuses before
the request reaches the group (``throwIfConsumerGroupHeartbeatRequestIsInvalid``), with
Kafka's messages:

* a member id is required from v1 on (the client generates it, KIP-1082), and in v0 for any
  epoch but a join (v0 joins with an empty id and the broker generates one);
* a group id, and no empty instance or rack id;
* a join (epoch 0) must carry the rebalance timeout, an empty owned-partitions list, and
  subscribed topic names or a regex (an empty list or regex is a valid subscription to nothing);
* a static leave (epoch -2) must carry the instance id; no epoch below -2;
* a named server assignor must be one of ``group.consumer.assignors`` (UNSUPPORTED_ASSIGNOR).

"Empty" is Java's ``String.trim().isEmpty()``: only characters up to U+0020.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sundial.protocol.errors import ErrorCode

from .assignment import Assignment, TopicId, freeze
from .errors import GroupError
from .member import JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH

#: From this version the consumer generates its member id (Kafka
#: ``CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION``, KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: Owned partitions (topic id → partitions); None when the request left them out.
    topic_partitions: Mapping[TopicId, Iterable[int]] | None = None
    version: int = 1

    @property
    def owned(self) -> Assignment | None:
        return None if self.topic_partitions is None else freeze(self.topic_partitions)

    @property
    def is_full(self) -> bool:
        """Whether the request carries every field a member sends after an error or on a join
        (Kafka's ``isFullRequest``): then the answer carries the whole assignment."""
        return (self.rebalance_timeout_ms != -1 and self.topic_partitions is not None
                and (self.subscribed_topic_names is not None or self.subscribed_topic_regex is not None))


@dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    #: The member's whole assignment, or None when the response leaves it out (unchanged).
    assignment: Assignment | None = None


def _empty(value: str | None) -> bool:
    return value is not None and value.strip(_JAVA_TRIM) == ""


def _invalid(message: str) -> GroupError:
    return GroupError(ErrorCode.INVALID_REQUEST, message)


def validate(request: HeartbeatRequest, assignors: Sequence[str]) -> None:
    """Raise :class:`GroupError` for a request Kafka refuses before looking at the group."""
    epoch = request.member_epoch
    if (request.version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0
            or epoch == LEAVE_GROUP_MEMBER_EPOCH) and _empty(request.member_id):
        raise _invalid("MemberId can't be empty.")
    if _empty(request.group_id):
        raise _invalid("GroupId can't be empty.")
    if _empty(request.instance_id):
        raise _invalid("InstanceId can't be empty.")
    if _empty(request.rack_id):
        raise _invalid("RackId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if request.rebalance_timeout_ms == -1:
            raise _invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or len(request.topic_partitions) != 0:
            raise _invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            raise _invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if request.instance_id is None:
            raise _invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise _invalid("MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in assignors:
        raise GroupError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {request.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(assignors)}.")
