"""Programmatic dependent launch: a chain of producer/consumer kernel pairs (pdl.cu) and its reference."""
