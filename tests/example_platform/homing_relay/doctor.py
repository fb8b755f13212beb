"""What ``homing doctor`` asks Relay: whether it takes the token."""

from __future__ import annotations

import aiohttp

from gateway.config.settings import secret
from gateway.platforms.checks import Check, DoctorContext, fail, ok
from homing_relay.settings import RelaySettings


async def checks(settings: RelaySettings, context: DoctorContext) -> list[Check]:
    headers = {"Authorization": f"Bearer {secret(settings.token)}"}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
                http.get(f"{settings.base_url}/me", headers=headers) as response:
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return [fail("relay token", f"{settings.base_url} did not answer: {exc}",
                     "check platforms.relay.base_url")]
    if response.status == 401:
        return [fail("relay token", "Relay refused the token",
                     "put the bot's token in homing.env (RELAY_TOKEN)")]
    return [ok("relay token", f"the bot is {body['user']['name']}")]
