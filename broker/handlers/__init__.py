"""One module per API family. Each exposes ``HANDLERS`` (API key → async handler) and may
narrow the protocol's supported versions with ``VERSIONS``. A handler takes the request
context and the decoded request and returns the response (a nested dict with the
schema's snake_case field names, or a protocol dataclass for the data-plane APIs),
or None when nothing must be sent (Produce with acks=0)."""
