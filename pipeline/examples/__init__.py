"""Example jobs that use the data source (run with ``python -m sundial.pipeline.examples.<name>``)."""
