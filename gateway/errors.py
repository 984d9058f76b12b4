"""OpenAI's error envelope, and the one exception type handlers turn into it."""

from __future__ import annotations

import orjson
from aiohttp import web


class GatewayError(Exception):
    """An error answered to the client as `{"error": {...}}` with `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict:
        return error_body(self.message, self.type, self.code, self.param)

    def response(self, extra_headers: dict[str, str] | None = None) -> web.Response:
        headers = {**self.headers, **(extra_headers or {})}
        return web.Response(
            status=self.status, body=orjson.dumps(self.body()), content_type="application/json", headers=headers
        )


def error_body(message: str, type: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> GatewayError:
    return GatewayError(400, message, "invalid_request_error", code, param)
