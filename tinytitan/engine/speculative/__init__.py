"""Speculative decoding: guess the next tokens cheaply, let the model check them all in one forward pass.

The parts, each usable alone:
- ``lookup``: prompt-lookup drafting (the continuation of the longest earlier match of the last n tokens);
- ``draft_model``: a small model's greedy guesses, with the tokenizer-agreement check that admits it;
- ``policy``: the draft length per step (adaptive k) and the off-switch for a request that copies nothing;
- ``sampling``: one draw per verified position, as the request would draw it alone (seeded ones included);
- ``verify``: the forward pass over a draft and the accepted prefix (the decode step runs it: step.py);
- ``speculator``: one row's drafting, as the decode step asks for it;
- ``fold``: what the decode step's fold does for drafting (after a verify, a drafting step, a leave).
"""
