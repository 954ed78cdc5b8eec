"""Streaming decoders for the inside of a tool call, one module per way families write it."""
