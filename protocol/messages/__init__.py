"""Hand-written data-plane codecs: Produce, Fetch, ListOffsets, and ShareFetch's response.

Each module exposes ``decode_request(api_version, frame, offset)`` returning slotted
dataclasses (records as memoryviews into the frame; not frozen, because a frozen
dataclass's ``__init__`` costs about twice as much and requests are built per call),
``encode_response_frame(api_version, header_bytes, response) -> list`` (the whole
frame; the response may be nested dicts or objects with Kafka's snake_case names),
``encode_request(api_version, request) -> bytes`` (body only; tests and tools) and
``is_request_object(obj)``. ``HAND_WRITTEN`` maps API keys to those modules.
ShareFetch decodes and encodes requests through the schema codec (its requests are small)
and writes only its response by hand, for the record payloads.
"""

from ..api_keys import ApiKey
from . import fetch, list_offsets, produce, share_fetch

HAND_WRITTEN: dict = {
    ApiKey.PRODUCE: produce,
    ApiKey.FETCH: fetch,
    ApiKey.LIST_OFFSETS: list_offsets,
    ApiKey.SHARE_FETCH: share_fetch,
}
