"""The field types every settings section is made of, platforms' own included: a strict
model (unknown keys are errors), URLs refused without their scheme."""

from __future__ import annotations

import types
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError


def _url(schemes: tuple[str, ...]) -> Any:
    """A URL setting: one without its scheme (``api.openai.com/v1``) would fail only at
    the first request, as a path on no host, so it is refused with the fix."""

    def check(value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme in schemes and parts.netloc:
            return value
        if "://" not in value:
            host = value.split("/", 1)[0].split(":", 1)[0]
            local = host in ("localhost", "127.0.0.1", "::1", "[::1]")
            # the loopback's servers are plain http (a local model); the rest use TLS
            scheme = schemes[-1] if local else schemes[0]
            raise PydanticCustomError("url_scheme", "`{value}` has no scheme: write "
                                      "`{fixed}`", {"value": value,
                                                    "fixed": f"{scheme}://{value}"})
        if parts.scheme not in schemes:
            raise PydanticCustomError("url_scheme", "expected a URL starting with {wanted}",
                                      {"wanted": " or ".join(f"{s}://" for s in schemes)})
        raise PydanticCustomError("url_host", "`{value}` has no host after {scheme}://",
                                  {"value": value, "scheme": parts.scheme})

    return AfterValidator(check)


#: an http(s) endpoint (https first: what a scheme-less address is given)
HttpUrl = Annotated[str, _url(("https", "http"))]
#: a WebSocket endpoint
WsUrl = Annotated[str, _url(("wss", "ws"))]


class Strict(BaseModel):
    """Unknown keys are errors: a typo (``alowed_users``) would otherwise silently open
    or close a door."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """pydantic reads ``true`` as 1 (``port: true`` would listen on port 1); numbers
        given as text stay accepted, since ``${PORT}`` substitutes text."""
        if isinstance(value, bool) and info.field_name in _number_fields(cls):
            raise PydanticCustomError("bool_not_number", "expected a number, not a boolean")
        return value


@cache
def _number_fields(model: type[BaseModel]) -> frozenset[str]:
    def is_number(annotation: Any) -> bool:
        if annotation in (int, float):
            return True
        return (get_origin(annotation) in (Union, types.UnionType)
                and any(arg in (int, float) for arg in get_args(annotation)))

    return frozenset(name for name, field in model.model_fields.items()
                     if is_number(field.annotation))
