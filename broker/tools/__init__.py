"""Operator tools behind the ``sundial`` command (issue 6)."""
