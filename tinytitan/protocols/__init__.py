"""Protocols: each is its spec table (spec/<name>.yaml) plus the Python the table cannot say."""
