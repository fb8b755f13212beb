"""Relay, as Homing's platform registry knows it: named by this package's entry point
(pyproject.toml), imported before anything else of the package, so it imports nothing
heavy."""

from __future__ import annotations

import re

from gateway.config.platform import Capabilities, PlatformSpec, TokenShape
from homing_relay.settings import RelaySettings

PLATFORM = PlatformSpec(
    name="relay", title="Relay", settings=RelaySettings,
    adapter="homing_relay.adapter:make_adapter",
    # the least a platform may be: no edits (replies are sent whole), no buttons
    # (approvals by /approve), no files
    capabilities=Capabilities(threads=True, message_limit=2000, dedupe_sends=True,
                              history=True, rate_limits="429 with retry_after, per bot"),
    required=("token",),
    token_shapes={"token": TokenShape(re.compile(r"relay-token-[0-9a-f]{16,}"),
                                      "relay-token- and 16 or more hex digits")},
    secrets={"token": "RELAY_TOKEN"},
    doctor="homing_relay.doctor:checks")
