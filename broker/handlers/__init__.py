"""One module per API family; :mod:`broker.dispatch` routes each API key to its handler.

A handler takes the request context and the decoded request and returns the response
(a nested dict with the schema's snake_case field names, or a protocol dataclass for
the data-plane APIs), or None when nothing must be sent (Produce with acks=0). A
handler module imports nothing from :mod:`broker.dispatch`: the table imports the
handlers, never the other way round."""
