"""Transactions (issue 14): the transaction coordinator and ``__transaction_state``.

``state`` is the pure metadata state machine, ``schema`` the record key/value format of
``__transaction_state``, ``log`` the topic over the broker's logs, ``coordinator`` the
request logic, markers and timers. docs/transactions.md describes the whole.
"""
