"""Kafka's modern (KIP-848) consumer groups."""
