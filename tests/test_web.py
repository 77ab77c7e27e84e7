"""The HTTP layer every server shares: access control, limits, one error shape, every status counted."""

from __future__ import annotations

import pytest
from fastapi import Request
from fastapi.testclient import TestClient

from textwm.config import ConfigError
from textwm.web import (
    BadBody,
    ServerSecurity,
    check_bind,
    clean_message,
    error_response,
    guard,
    make_app,
    read_json_body,
)

JSON = {"content-type": "application/json"}


def app_with(security: ServerSecurity = ServerSecurity(), host: str | None = None):
    app = make_app("test", security)

    @app.post("/echo")
    async def echo(request: Request):
        try:
            return await read_json_body(request)
        except BadBody as exc:              # as every server route does
            return error_response(request, 400, str(exc), "invalid_request_error")

    @app.get("/boom")
    async def boom():
        raise RuntimeError("/home/user/secret/checkpoint is broken")

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return guard(app, security, host=host)


def test_bodies_are_checked_before_any_route_and_errors_have_one_shape():
    client = TestClient(app_with(ServerSecurity(max_body_bytes=2048)), raise_server_exceptions=False)
    r = client.post("/echo", json={"a": 1})
    assert r.status_code == 200 and r.json() == {"a": 1} and r.headers["x-request-id"]
    cases = [
        (client.post("/echo", content=b'{"a": 1}', headers={"content-type": "text/plain"}), 415, "Content-Type"),
        (client.post("/echo", content=b"x" * 5000, headers=JSON), 413, "larger than 2048"),
    ]
    for r, status, needle in cases:
        err = r.json()["error"]
        assert r.status_code == status and needle in err["message"] and err["request_id"] == r.headers["x-request-id"]
    boom = client.get("/boom")
    err = boom.json()["error"]
    assert boom.status_code == 500 and err["type"] == "server_error" and err["request_id"] in err["message"]
    assert "secret" not in boom.text
    assert client.get("/nope").status_code == 404 and client.get("/nope").json()["error"]["type"]
    assert client.get("/docs").status_code == 404 and client.get("/openapi.json").status_code == 404
    assert client.app.statuses[500] == 1 and client.app.statuses[415] == 1 and client.app.statuses[413] == 1


def test_a_chunked_body_over_the_limit_is_a_413_too():
    """No Content-Length to refuse it by: the guard counts the bytes as the route reads them."""
    client = TestClient(app_with(ServerSecurity(max_body_bytes=2048)), raise_server_exceptions=False)

    def chunks():
        for _ in range(10):
            yield b'{"a": "' + b"x" * 1000 + b'"}'

    r = client.post("/echo", content=chunks(), headers=JSON)
    assert r.status_code == 413 and "larger than 2048" in r.json()["error"]["message"]
    assert client.app.statuses[413] == 1 and client.app.statuses[500] == 0


@pytest.mark.parametrize(("raw", "needle"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"a": ' + b"9" * 5000 + b"}", "unreadable JSON"),
    (b'{"a": "x\\ud800"}', "lone surrogate"),
    (b'{"a": ' + b'{"b": ' * 70 + b"1" + b"}" * 70 + b"}", "nested deeper"),
    (b"[1, 2]", "must be a JSON object"),
    (b"{oops", "malformed JSON"),
    (b'{"temperature": Infinity}', "Infinity is not a JSON number"),
    (b'{"a": [1, NaN]}', "NaN is not a JSON number"),
    (b'{"a": -Infinity}', "-Infinity is not a JSON number"),
    (b'{"temperature": 1e999}', "1e999 (beyond a float) is not a JSON number"),
])
def test_hostile_json_is_a_400_never_a_500(raw, needle):
    client = TestClient(app_with(ServerSecurity(max_body_bytes=1_000_000)), raise_server_exceptions=False)
    r = client.post("/echo", content=raw, headers=JSON)
    assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text


def test_api_key_host_check_docs_and_bind_rules():
    keyed = TestClient(app_with(ServerSecurity(api_key="s3cret", docs=True)))
    assert keyed.post("/echo", json={}).status_code == 401
    assert keyed.post("/echo", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert keyed.post("/echo", json={}, headers={"Authorization": "Bearer s3cret"}).status_code == 200
    assert keyed.post("/echo", json={}, headers={"Authorization": "bearer s3cret"}).status_code == 200   # RFC 9110
    assert keyed.post("/echo", json={}, headers={"Authorization": "Basic s3cret"}).status_code == 401
    assert keyed.get("/health").status_code == 200                  # health needs no key
    assert keyed.get("/docs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
    loopback = TestClient(app_with(host="127.0.0.1"), base_url="http://127.0.0.1:30003")
    assert loopback.get("/health").status_code == 200
    rebound = TestClient(app_with(host="127.0.0.1"), base_url="http://evil.example:30003")
    r = rebound.post("/echo", json={})
    assert r.status_code == 421 and "evil.example" in r.json()["error"]["message"]
    shouted = TestClient(app_with(host="127.0.0.1"), base_url="http://LOCALHOST:30003")
    assert shouted.get("/health").status_code == 200                # host names are case-insensitive
    check_bind("127.0.0.1", ServerSecurity())
    check_bind("0.0.0.0", ServerSecurity(api_key="k"))
    check_bind("0.0.0.0", ServerSecurity(allow_unauthenticated=True))
    with pytest.raises(ConfigError, match="--host .*without an API key"):
        check_bind("0.0.0.0", ServerSecurity())


def test_error_messages_are_bounded_and_free_of_local_paths():
    assert clean_message("cannot read /home/me/runs/ckpt/config.json") == "cannot read config.json"
    long = clean_message("x" * 5_000_000)
    assert len(long) < 500 and "5000000 characters" in long


def test_a_delete_with_a_body_must_be_json_and_http10_without_host_is_served():
    import asyncio

    app = app_with(host="127.0.0.1")

    @app.app.delete("/thing")
    async def delete_thing(request: Request):
        return await read_json_body(request)

    client = TestClient(app, base_url="http://127.0.0.1:30003")
    r = client.request("DELETE", "/thing", content=b"session=1", headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
    assert client.request("DELETE", "/thing", json={"session_id": "s"}).json() == {"session_id": "s"}

    async def no_host():          # an HTTP/1.0 request carries no Host header
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)
        await app({"type": "http", "method": "GET", "path": "/health", "headers": [],
                   "http_version": "1.0", "query_string": b"", "root_path": "", "scheme": "http",
                   "server": ("127.0.0.1", 30003), "client": ("127.0.0.1", 5000)}, receive, send)
        return sent[0]["status"]
    assert asyncio.run(no_host()) == 200
