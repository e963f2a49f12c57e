"""OpenAI-shaped errors: {"error": {"message", "type", "param", "code"}} with an HTTP status."""

from __future__ import annotations

import orjson


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        err_type: str = "invalid_request_error",
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.err_type = err_type
        self.param = param
        self.headers = headers or {}

    def body(self) -> bytes:
        return orjson.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": self.err_type,
                    "param": self.param,
                    "code": self.code,
                }
            }
        )


def unauthorized(message: str = "Missing or invalid API key.") -> GatewayError:
    return GatewayError(
        401,
        message,
        code="invalid_api_key",
        err_type="authentication_error",
        headers={"www-authenticate": "Bearer"},
    )


def model_not_found(model: str) -> GatewayError:
    # The same answer whether the name exists elsewhere or nowhere: another tenant's adapter does
    # not exist for this caller.
    return GatewayError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def too_many(message: str, retry_after: int, code: str) -> GatewayError:
    return GatewayError(
        429,
        message,
        code=code,
        err_type="rate_limit_error",
        headers={"retry-after": str(max(1, retry_after))},
    )


def unavailable(
    message: str, code: str = "engine_unavailable", retry_after: int | None = None
) -> GatewayError:
    headers = {"retry-after": str(max(1, retry_after))} if retry_after is not None else None
    return GatewayError(503, message, code=code, err_type="server_error", headers=headers)


def held_for_live(engine: str, busy: int, headroom: int) -> GatewayError:
    """A background request (an eval run's) the engine has no room for beside the slots kept
    free for live requests (gateway.limits); its caller waits and asks again."""
    return unavailable(
        f"Engine '{engine}' has {busy} sequences in flight; {headroom} of its slots are kept for "
        "live requests, so this background request waits.",
        code="held_for_live_traffic",
        retry_after=1,
    )


def no_slot(engine: str, weight: int, share: int, capacity: int, over_share: bool) -> GatewayError:
    """No slot on the engine: over its tenant's share of a shared engine (refused at once), or
    the engine stayed full for the request's time budget (gateway.fairness)."""
    if over_share:
        return too_many(
            f"This request runs {weight} sequences (n x prompts); while other tenants use "
            f"this pool's engines, one tenant may hold at most {share} of an engine's "
            f"{capacity}. Ask for fewer sequences, or retry later.",
            retry_after=5,
            code="fair_share_exceeded",
        )
    return unavailable(
        f"Engine '{engine}' stayed full for this request's time budget; try again shortly.",
        code="engine_busy",
        retry_after=1,
    )


def limits_unavailable() -> GatewayError:
    """Redis is away: limits cannot be checked, so nothing is admitted (fail closed)."""
    return unavailable(
        "The gateway cannot check rate and concurrency limits right now; try again shortly.",
        code="limits_unavailable",
        retry_after=2,
    )
