"""``Grown``: a text attribute the parsers grow a token's piece at a time and read whole only now and then."""

from __future__ import annotations


class Grown:
    """A text attribute grown piece by piece (a call block's text as fed, a call's arguments as streamed) and read
    whole only now and then (a call's end, a block's check). ``obj.attr += piece`` on a plain string attribute
    copies the whole string each time (CPython grows a string in place only in a local variable): quadratic over a
    long call, about 4 µs a token for each such string at 32k tokens (tools/bench_call_args.py). Here ``grow``
    appends the piece, and reading joins the pieces once; assigning replaces the text."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = f"_{name}_pieces"

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        pieces = obj.__dict__.get(self.slot)
        if not pieces:
            return ""
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0]

    def __set__(self, obj, text: str) -> None:
        obj.__dict__[self.slot] = [text] if text else []

    def grow(self, obj, piece: str) -> None:
        if piece:
            obj.__dict__.setdefault(self.slot, []).append(piece)
