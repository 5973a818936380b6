"""Share groups (KIP-932): the pure coordinator (records, simple assignor, membership state machine)."""
