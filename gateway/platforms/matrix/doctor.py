"""What ``homing doctor`` asks the homeserver: its ``/versions``, who the access token is
(``/account/whoami``), and the rooms the bot is in, the encrypted ones flagged (homing
does not read those)."""

from __future__ import annotations

from gateway.platforms.checks import Check, DoctorContext, fail, ok, token_failure, warn
from gateway.platforms.matrix.settings import MatrixSettings
from gateway.platforms.probe import ProbeError


async def checks(settings: MatrixSettings, context: DoctorContext) -> list[Check]:
    """The registry's way in (gateway/platforms/matrix/spec.py)."""
    from gateway.platforms.matrix.probe import rooms, versions, whoami

    homeserver = settings.homeserver or ""
    found: list[Check] = []
    try:
        spoken = await versions(homeserver)
    except ProbeError as exc:
        return [fail("matrix homeserver", exc.problem, exc.fix)]
    found.append(ok("matrix homeserver", f"{homeserver} speaks {', '.join(spoken[-3:])}"))
    if settings.access_token is None:
        found.append(warn("matrix token", "no access_token: the daemon logs in with the "
                                          "password at each start",
                          "run homing setup to log in once and keep a token"))
        return found
    token = settings.access_token.get_secret_value()
    try:
        me = await whoami(homeserver, token)
    except ProbeError as exc:
        found.append(token_failure("matrix", "MATRIX_ACCESS_TOKEN", exc))
        return found
    if me.user_id != settings.user_id:
        found.append(fail("matrix token", f"the token is {me.user_id}'s, not "
                                          f"{settings.user_id}'s",
                          "set platforms.matrix.user_id to the bot's id, or give its token"))
    else:
        found.append(ok("matrix token", f"{me.user_id} on device {me.device_id}"))
    try:
        joined = await rooms(homeserver, token)
    except ProbeError as exc:
        found.append(warn("matrix rooms", exc.problem, exc.fix))
        return found
    encrypted = sorted(room for room, e2e in joined.items() if e2e)
    found.append(ok("matrix rooms", f"in {len(joined)} room(s)"))
    if encrypted:
        found.append(warn("matrix encrypted rooms",
                          f"{', '.join(encrypted)}: end-to-end encrypted, not read",
                          "talk to the bot in rooms without encryption"))
    return found
