"""A process that exits while its prompt-cache writer is still writing (a server stopped by Ctrl-C or SIGTERM just
as the generations it cancelled stored their prefixes) ends cleanly, with the queued prefixes on disk."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

EXIT_WHILE_WRITING = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache
    from tinytitan.engine.cache.disk import PromptDisk

    d = Path(sys.argv[1])
    weights = d.parent / "weights.safetensors"
    weights.write_bytes(b"x")
    disk = PromptDisk(d, [weights], lambda: "layout", 1 << 40)
    n = 4096
    for i in range(20):  # twenty conversations' prefixes queued, as a server's cancelled generations store theirs
        c = KVCache()
        c.update_and_fetch(mx.zeros((1, 8, n, 64)), mx.zeros((1, 8, n, 64)))
        disk.put(np.arange(n) + i * n, [c], ())
    while not list(d.glob(".*tmp*")):  # the writer is inside its first write
        time.sleep(0.001)
    # the script ends here: the interpreter exits while the writer still writes
""")


def test_exiting_while_the_prompt_cache_writes_neither_aborts_nor_loses_the_queue(tmp_path):
    for attempt in range(3):  # (the abort needs a write to end while the interpreter is finalizing: most runs)
        d = tmp_path / f"cache{attempt}"
        d.mkdir()
        proc = subprocess.run([sys.executable, "-c", EXIT_WHILE_WRITING, str(d)], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0 and "terminate called" not in proc.stderr, (proc.returncode, proc.stderr[-2000:])
        assert len(list(d.glob("*.safetensors"))) == 20 and not list(d.glob(".*tmp*"))
