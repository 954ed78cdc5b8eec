import httpx, pytest
MODEL = "tinytitan-scripted"
@pytest.mark.parametrize("opt", [{"seed": 1e30}, {"num_predict": 1e30}, {"top_k": 1e30}, {"repeat_last_n": 1e30}, {"num_ctx": 1e30}])
async def test_big(serve, opt):
    s = await serve(["hello there"])
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.post(s.url("/api/chat"), json={"model": MODEL, "stream": False, "messages": [{"role": "user", "content": "hi"}], "options": opt})
    print(opt, r.status_code, r.text[:200])
    assert r.status_code < 500
