"""Progress of long work — a GGUF conversion, the demo model's build, a model's load, a download: a bar on a
terminal, a plain log line per stage otherwise.

Rules:
- One ``Progress`` per piece of work: ``with Progress(log, "loading m", total=n) as p: p.update(k)``;
  ``p.stage("training the tokenizer")`` names what it does now.
- On a terminal (stderr is a TTY; ``TINYTITAN_PROGRESS=bar`` or ``lines`` overrides): a tqdm bar on stderr,
  left in place when done. tqdm is the well-kept bar (huggingface_hub's own downloads draw with it too).
- Otherwise (a log file, CI, a server started by ``tinytitan launch``): the logger gets a line when a stage
  begins, one at most every ``every`` seconds with the share done, and one at the end with the time taken.
  ``line`` may word the periodic line itself (the GGUF converter's says tensors and megabytes).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Callable


def on_terminal() -> bool:
    forced = os.environ.get("TINYTITAN_PROGRESS", "").lower()
    if forced in ("bar", "lines"):
        return forced == "bar"
    return bool(getattr(sys.stderr, "isatty", None) and sys.stderr.isatty())


class Progress:
    def __init__(self, log: logging.Logger, desc: str, total: float, unit: str = "it", every: float = 2.0,
                 line: Callable[[float, float], str] | None = None, ends: bool = True):
        self.log, self.desc, self.total, self.unit, self.every = log, desc, total or 1, unit, every
        self.line, self.ends = line, ends
        self.done = 0.0
        self.t0 = self.last = time.perf_counter()
        self.bar = None
        if on_terminal():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "B", unit_divisor=1024,
                            file=sys.stderr, leave=True, dynamic_ncols=True)
        elif ends:
            log.info("%s …", desc)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close(failed=exc[0] is not None)

    def stage(self, what: str) -> None:
        """Name the stage now running (the bar's postfix; a log line of its own)."""
        if self.bar is not None:
            self.bar.set_postfix_str(what)
        else:
            self.log.info("%s: %s", self.desc, what)

    def update(self, n: float = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        now = time.perf_counter()
        if now - self.last >= self.every or self.done >= self.total:
            self.last = now
            fraction = min(1.0, self.done / self.total)
            self.log.info("%s", self.line(fraction, now - self.t0) if self.line else
                          f"{self.desc}: {100 * fraction:3.0f}% ({now - self.t0:.0f}s)")

    def close(self, failed: bool = False) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.ends and not failed:
            self.log.info("%s: done in %.1fs", self.desc, time.perf_counter() - self.t0)
