"""What an adapter is made with, besides its own settings: handed to the ``adapter``
callable a :class:`~gateway.config.platform.PlatformSpec` names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.cluster.instances import Lease
    from gateway.config.settings import Config
    from gateway.store.state import StateDatabase
    from tools.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class PlatformContext:
    """The whole config (``attachments``, ``inbound``…), and on a shared store what an
    adapter needs to share with the other instances."""

    config: Config
    #: the schedules, for an adapter that shows and changes them (the web chat's REST API)
    scheduler: Scheduler | None = None
    #: on a shared store, the lease of a name among the instances: a connection that must
    #: be single (one poller per token, one gateway session per bot) is used by its holder
    leases: Callable[[str], Lease] | None = None
    #: on a shared store, the store and this life's name there
    shared: tuple[StateDatabase, str] | None = None
