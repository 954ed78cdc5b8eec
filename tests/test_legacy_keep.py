"""The older store served only its newest 256 responses, but its log held up to twice that before it was rewritten:
the migration moved every put in the log, bringing back responses the older store had already evicted."""

import json
import time

from tinytitan.store.responses_store import FILE_NAME, ResponsesStore


async def test_the_older_log_migrates_only_what_the_older_store_kept(tmp_path):
    now = int(time.time())
    (tmp_path / FILE_NAME).write_text("".join(json.dumps(
        {"op": "put", "id": f"r{i}", "input": [], "events": [{"response": {"id": f"r{i}", "output": []}}],
         "previous_response_id": None, "created_at": now - 1000 + i, "extra": {}}) + "\n" for i in range(400)))
    store = ResponsesStore.open(str(tmp_path))
    assert await store.get("r0") is None  # the older store kept the newest 256: r0 was gone from it
    assert await store.count() == 256
