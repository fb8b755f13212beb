"""The web chat, as the platform registry knows it."""

from __future__ import annotations

from gateway.config.platform import Capabilities, PlatformSpec
from gateway.platforms.web.settings import WebConfig

PLATFORM = PlatformSpec(
    name="web", title="web chat", settings=WebConfig,
    adapter="gateway.platforms.web.adapter:make_adapter",
    capabilities=Capabilities(
        edits=True, buttons=True, files_in=True, files_out=True, typing=True,
        # a send made again carries the same key, and a page shows a key once
        dedupe_sends=True,
        message_limit=1_000_000,  # browsers have no practical limit
        rate_limits="none: its own server", home_channels=False),
    secrets={"token": "HOMING_WEB_TOKEN"},
    doctor="gateway.platforms.web.doctor:checks")
