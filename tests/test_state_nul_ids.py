"""An id with a NUL character, on either database: PostgreSQL's text cannot hold one, and its DataError was a 500
(a GET, a DELETE, input_items' cursor, previous_response_id, an item reference), and a client's input item id
holding one lost the answer after it was generated. Now such an id is simply never found, and the item is kept."""

from __future__ import annotations

import httpx

from responses_helpers import MODEL, client, get, post
from pg_server import pg, state  # noqa: F401  (the fixtures: a SQLite directory, a PostgreSQL database)


async def test_an_id_with_a_nul_is_not_found_never_a_500(serve, state):  # noqa: F811
    s = await serve(["one", "two", "three"], responses_store=state)
    c = client(s)
    r1 = await c.responses.create(model=MODEL, input="a")
    for path in ("/v1/responses/x%00y", "/v1/responses/x%00y/input_items"):
        assert (await get(s, path)).status_code == 404
    r = await get(s, f"/v1/responses/{r1.id}/input_items", params={"after": "a\0b"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "after"
    async with httpx.AsyncClient() as h:
        assert (await h.delete(s.url("/v1/responses/x%00y"))).status_code == 404
    r = await post(s, "/v1/responses", {"model": MODEL, "input": "b", "previous_response_id": "resp_\0"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "previous_response_not_found"
    r = await post(s, "/v1/responses", {"model": MODEL, "input": [{"type": "item_reference", "id": "x\0"}]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "input[0].id"

    # an input item whose own id holds one: answered, stored, listed and continued
    r = await post(s, "/v1/responses", {"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": "hi", "id": "m\0"}]})
    assert r.status_code == 200, r.text
    rid = r.json()["id"]
    assert (await c.responses.retrieve(rid)).output_text == "two"
    assert [i.id for i in (await c.responses.input_items.list(rid)).data] == ["m\0"]
    r3 = await c.responses.create(model=MODEL, input="c", previous_response_id=rid)
    assert r3.output_text == "three"


async def test_a_page_ends_on_an_item_whose_id_holds_a_nul(serve, state):  # noqa: F811
    """Its id is the page's last_id, the cursor a client (the SDK's auto-paging) sends for the next page."""
    s = await serve(["one"], responses_store=state)
    r = await post(s, "/v1/responses", {"model": MODEL, "input": [
        {"type": "message", "role": "user", "content": "hi", "id": "m\0"},
        {"type": "message", "role": "user", "content": "there", "id": "m2"}]})
    rid = r.json()["id"]
    path = f"/v1/responses/{rid}/input_items"
    page = (await get(s, path, params={"limit": 1, "order": "asc"})).json()
    assert page["last_id"] == "m\0" and page["has_more"]
    r = await get(s, path, params={"limit": 1, "order": "asc", "after": page["last_id"]})
    assert r.status_code == 200, r.text
    assert [i["id"] for i in r.json()["data"]] == ["m2"]
    r = await get(s, path, params={"order": "asc", "before": "m2"})
    assert [i["id"] for i in r.json()["data"]] == ["m\0"]
