"""Persistent state kept between requests (stored Responses objects)."""
