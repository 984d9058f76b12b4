"""The engine's request errors in OpenAI's envelope, without depending on the gateway.

`engine/` never imports `gateway/`: the engine server answers these itself, and the gateway's
engine backend maps them to its own errors (same status, same body).
"""

from __future__ import annotations


class EngineRequestError(Exception):
    """An error answered to the client as `{"error": {"message", "type", "param", "code"}}` with `status`."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", code: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param

    def body(self) -> dict:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> EngineRequestError:
    return EngineRequestError(400, message, "invalid_request_error", code, param)
