"""Watching the server work: per-request records, the request log, Prometheus metrics, the ``/profile``
window and the dashboard's live feed. Fed by the HTTP layer (``observer.Observer``) and by the TokenEvents a
generation streams (``turn.watch``); it never sees prompt or answer text."""
