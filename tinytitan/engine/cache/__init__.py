"""The prompt cache: prefixes with their KV caches in memory and on disk, and why a prompt missed."""
