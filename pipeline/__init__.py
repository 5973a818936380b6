"""Placeholder; see docs/architecture.md."""
