"""HTTP: routes from the spec tables onto a Quart-trio app served by hypercorn."""
