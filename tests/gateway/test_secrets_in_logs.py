"""Secrets a client sends (API keys, cookies) never reach a log line or an error message, however mangled the
HTTP that carries them."""

from __future__ import annotations

import logging

import orjson
import pytest

from tests.gateway.test_hostile_input import raw_http
from tests.helpers import BODY, route, upstream_policy

KEY = b"sk-live-SECRET0123456789abcdef"
COOKIE = b"session=COOKIE0123456789"


def policy(upstream: str) -> str:
    return upstream_policy(upstream, route("fake-model"))


def request(auth_line: bytes) -> bytes:
    raw = orjson.dumps(BODY)
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Cookie: " + COOKIE + b"\r\n" + auth_line + b"\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)


@pytest.mark.parametrize("auth_line", [
    b"Authorization: Bearer \x01" + KEY,  # a stray control byte in the value
    b"Authorization : Bearer " + KEY,  # a space before the colon
    b"Author\x01zation: Bearer " + KEY,  # a stray byte in the name
    b"Authorization: Bearer " + KEY + b"\x7f",
    b"Authorization: Bearer " + KEY + b"a" * 20000,  # over max_header_bytes: the parser quotes its start
], ids=["control-byte", "space-before-colon", "byte-in-name", "trailing-del", "too-long"])
def test_malformed_header_lines_never_reach_the_log_or_the_answer(gw, caplog, auth_line: bytes) -> None:
    fake, srv = gw
    caplog.set_level(logging.DEBUG)
    out = raw_http(srv.url, request(auth_line))
    head, _, payload = out.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", head
    err = orjson.loads(payload)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] in ("bad_http_request", "headers_too_large"), err
    for secret in (KEY, COOKIE, b"SECRET", b"COOKIE"):
        assert secret not in out
        assert secret.decode() not in caplog.text
    assert fake.request_count == 0
    assert err["message"].startswith("Bad HTTP request: ")
