"""kafka-python's framed encodings of the schema corpus (``protocol_cases``): the bytes a
client sends or expects, built with kafka-python's own constructors, as ground truth for
Sundial's codecs and as valid input for the fuzz targets."""

from __future__ import annotations

from sundial.protocol.api_keys import SUPPORTED_VERSIONS
from support.protocol_cases import CASE_NAMES, case_value, schema_classes, to_kp


def supported_cases(keep, cases=CASE_NAMES) -> list[tuple[int, int, str]]:
    """``(api_key, version, case)`` for every supported version of each API ``keep(api_key)``
    selects, in API key order, each version with every one of ``cases``."""
    return [(int(key), version, case) for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items()) if keep(key)
            for version in range(lo, hi + 1) for case in cases]


def kp_framed(message_cls, value: dict, version: int, **header) -> tuple[object, bytes]:
    """kafka-python's message for ``value`` with its header fields set (``correlation_id``,
    ``client_id``), and that message encoded with its header and size prefix."""
    kp = to_kp(message_cls, value, version)
    kp.with_header(**header)
    return kp, bytes(kp.encode(header=True, framed=True))


def kp_case(api_key: int, version: int, case: str, *, response: bool, **header) -> tuple[dict, object, bytes]:
    """The corpus value of one case of an API's request (or response), and :func:`kp_framed` of it."""
    message_cls = schema_classes(api_key)[1 if response else 0]
    value = case_value(message_cls, version, case)
    return (value, *kp_framed(message_cls, value, version, **header))


def request_corpus(correlation_id: int = 7, client_id: str = "fuzz") -> list[bytes]:
    """Every supported request, sparse and with every field set, as frames without the size prefix."""
    return [kp_case(key, version, case, response=False, correlation_id=correlation_id, client_id=client_id)[2][4:]
            for key, version, case in supported_cases(lambda _key: True, ("sparse", "full"))]
