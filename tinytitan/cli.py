"""The ``tinytitan`` command: ``serve`` (the server: serve.py), ``launch`` (an agent set up for it:
tinytitan/launch/), ``memory`` and ``demo-model`` (write the demo model anywhere). Its flags: flags.py."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .flags import build_parser
from .serve import serve

log = logging.getLogger("tinytitan")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["launch"]:  # its own parser: what follows `--` is the agent's (tinytitan/launch/)
        from .launch.command import main as launch

        return launch(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, getattr(args, "log_level", "info").upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "memory":
        from .memory.cli import run

        return run(args)
    if args.command == "demo-model":
        from .demo_model import build_demo_model

        out = build_demo_model(Path(args.path), variant=args.variant)
        print(out)
        return 0
    return serve(args)
