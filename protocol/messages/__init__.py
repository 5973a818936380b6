"""Hand-written data-plane codecs: Produce, Fetch, ListOffsets.

Each module exposes ``decode_request(api_version, frame, offset)``,
``encode_response_frame(api_version, header_bytes, response) -> list``,
``encode_request(api_version, request) -> bytes`` and
``is_request_object(obj)``. ``HAND_WRITTEN`` maps API keys to those modules.
"""

HAND_WRITTEN: dict = {}
