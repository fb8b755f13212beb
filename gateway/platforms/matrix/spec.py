"""Matrix, as the platform registry knows it: no matrix-nio here, which is imported
only when Matrix is enabled."""

from __future__ import annotations

from gateway.config.platform import Capabilities, PlatformSpec
from gateway.platforms.matrix.settings import MatrixSettings

PLATFORM = PlatformSpec(
    name="matrix", title="Matrix", settings=MatrixSettings,
    adapter="gateway.platforms.matrix.adapter:make_adapter",
    capabilities=Capabilities(
        threads=True, edits=True, buttons=False, files_in=True, files_out=True, typing=True,
        # an event is at most 65,536 bytes, and an edit carries its text three times
        # (the fallback body, m.new_content's body and its HTML): 6,000 characters keep
        # it under that even for three-byte characters, and read well in any client
        message_limit=6000, dedupe_sends=True, confirms_sends=True, history=True,
        rate_limits="per user (Synapse's rc_message: a burst, then a few a second); a "
                    "429 M_LIMIT_EXCEEDED's retry_after_ms waited out per room, each "
                    "room's order kept, previews skipped meanwhile"),
    required=("homeserver", "user_id"),
    # no token shape: an access token is opaque (Synapse's are syt_…, others' differ)
    secrets={"access_token": "MATRIX_ACCESS_TOKEN", "password": "MATRIX_PASSWORD"},
    setup="gateway.platforms.matrix.setup:QUESTIONS",
    doctor="gateway.platforms.matrix.doctor:checks",
    pairing=False)
