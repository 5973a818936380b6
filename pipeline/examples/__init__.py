"""Example jobs that use the data source (run with ``python -m pipeline.examples.<name>``)."""
