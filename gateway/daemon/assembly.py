"""Assembling and running the gateway: store, outbox, jobs, agent, runner, router, adapters."""

from __future__ import annotations

import asyncio
import functools
import gc
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agent.command import CommandAgent, command_subagent
from agent.toolbox import ToolBox
from gateway.approvals.decisions import Approvals
from gateway.cluster.lives import ALONE
from gateway.config.registry import load_object, platforms
from gateway.config.settings import Config
from gateway.contract.adapter import Adapter
from gateway.daemon.event_loop import loop_name
from gateway.daemon.lifecycle import Lifecycle
from gateway.daemon.restart_notices import BackOnline, announce_restart, places_in_progress
from gateway.delivery.outbox import Outbox
from gateway.delivery.router import Router
from gateway.errors import ConfigurationError, HomingError
from gateway.machine.private_files import private_dir, tighten_home
from gateway.machine.processes import raise_open_file_limit
from gateway.messages.pairing import Pairing
from gateway.messages.runner import GatewayRunner
from gateway.platforms.context import PlatformContext
from gateway.sessions.store import SessionStore
from gateway.store.state import StateDatabase, is_postgres
from gateway.store.status_file import keep_status, write_status
from gateway.systemd.notify import Notifier
from gateway.telemetry.otlp_metrics import OtlpMetrics, export_metrics, export_seconds
from gateway.tracing import configure_tracing, tracing
from tools.delegation import DelegationManager, SubAgent
from tools.jobs import JobManager
from tools.jobs_elsewhere import JobsElsewhere
from tools.scheduler import Scheduler
from tools.send_message import MessageSender
from tools.terminal import Terminal

if TYPE_CHECKING:
    from agent.model import ModelAgent
    from agent.model_client import ModelClient
    from gateway.cluster.instances import Instance
    from gateway.messages.turn import Agent

log = structlog.get_logger(__name__)

#: handled messages are remembered this long, to know a redelivery when it comes
INBOUND_KEEP_SECONDS = 7 * 86400
READY_WAIT = 60.0  # READY=1 waits this long for every platform to connect
STORE_CHECK_SECONDS = 60.0
#: the cycle collector's thresholds once started (CPython's default is 700, 10, 10)
GC_THRESHOLD = (50_000, 20, 20)


class StartupError(ConfigurationError, RuntimeError):
    """The daemon cannot start with this configuration."""


class InstanceEnded(HomingError, RuntimeError):
    """This daemon's life among the instances is over (its lease ran out while the store
    was out of reach, or another process took its name): it stops, and its service
    manager starts it again under a new epoch."""


@dataclass(slots=True)
class Gateway:
    """The running parts, for whoever needs to reach them (tests, ops endpoints)."""

    config: Config
    store: SessionStore
    outbox: Outbox
    jobs: JobManager
    delegations: DelegationManager
    runner: GatewayRunner
    router: Router
    scheduler: Scheduler
    #: how its parts stop: the daemon stops them taking anything new as the stop begins
    life: Lifecycle
    #: on a shared store, this daemon's life among the instances
    instance: Instance | None = None


def build_adapters(config: Config, scheduler: Scheduler | None = None,
                   instance: Instance | None = None) -> list[Adapter]:
    """The enabled platforms' adapters, each made by the callable its spec names
    (gateway/config/registry.py), so a platform's library is imported only when it is
    enabled (python-telegram-bot and discord.py are 8 MB each in a web-only daemon).
    The web chat's REST API shows and changes ``scheduler``'s schedules. On a shared
    store (``instance``), a connection that must be single — one getUpdates poller per
    Telegram token, one gateway session per Discord bot — is used by the instance
    holding its lease, while every instance sends; and web frames go to the tabs open
    on every instance."""
    leases: Callable[[str], Lease] | None = None
    shared: tuple[StateDatabase, str] | None = None
    if instance is not None:
        from gateway.cluster.instances import Lease  # (psycopg: only on PostgreSQL)

        leases = functools.partial(Lease, instance)
        shared = (instance.db, f"{instance.name}:{instance.epoch}")
    context = PlatformContext(config, scheduler, leases, shared)
    adapters: list[Adapter] = []
    for name in config.platforms.enabled():
        spec = platforms()[name]
        try:
            make = load_object(spec.adapter)
        except ImportError as exc:
            raise StartupError(f"platforms.{name}: its adapter ({spec.adapter}) cannot be "
                               f"imported: {exc} (is its package installed?)") from None
        for key, settings in config.platforms.bots(name):  # one adapter a bot (account)
            adapter = make(settings, context)
            if not isinstance(adapter, Adapter) or adapter.platform != key:
                raise StartupError(
                    f"platforms.{name}: {spec.adapter} made {type(adapter).__name__} for "
                    f"{getattr(adapter, 'platform', None)!r}, not an Adapter for {key!r}"
                    + (" (does the platform take accounts?)" if key != name else ""))
            adapters.append(adapter)
    return adapters


@asynccontextmanager
async def running_gateway(config: Config, extra_adapters: list[Adapter] | None = None, *,
                          clock: Callable[[], float] = time.time) -> AsyncIterator[Gateway]:
    """The gateway with its store open, every adapter connected and jobs re-attached.

    ``clock`` is the scheduler's and the approvals' (tests move it on instead of waiting).
    """
    if not (extra_adapters or config.platforms.enabled()):
        raise StartupError("platforms: no platform is enabled; enable platforms.web at least")
    private_dir(config.home_path)
    await asyncio.to_thread(tighten_home, config.home_path)
    async with SessionStore(config.state_location) as store:
        async with Lifecycle() as life:
            # the model client (openai: 26 MB) only for the model agent
            model = _model_client(config) if config.agent.backend == "openai" else None
            if model is not None:
                life.add("model", shutdown=model.close)
            instance = None
            if is_postgres(config.state_location):
                from gateway.cluster.instances import Instance  # (psycopg: only on PostgreSQL)

                instance = Instance.from_config(store.db, config)
                await life.start("instance", instance.start(), shutdown=instance.stop)
            # what this daemon takes on is this life's: a restart (here or on another host),
            # or a survivor, finds the last life's by its epoch, not by a process id; and a
            # life whose renewal is overdue waits before it acts, one that is over acts no more
            here = instance.life if instance is not None else ALONE
            outbox = Outbox(store.db, life=here)
            jobs = JobManager(store.db, outbox, config, life=here)
            terminal = Terminal(jobs, foreground_timeout=config.jobs.foreground_timeout_seconds)
            subagent_tools = ToolBox.foreground_only(terminal)
            subagent = (_model_subagent(config, model, subagent_tools)
                        if model is not None else command_subagent(terminal))
            delegations = DelegationManager(
                store.db, outbox, store, subagent,
                max_running_per_session=config.delegations.max_running_per_session, life=here)
            scheduler = Scheduler(store.db, outbox, store, jobs, config.schedules, clock=clock,
                                  prompts=model is not None)
            command_agent = CommandAgent(terminal, delegations, scheduler)
            adapters = [*build_adapters(config, scheduler, instance), *(extra_adapters or [])]
            model_agents: list[ModelAgent] = []

            def answering(runner: GatewayRunner) -> Agent:
                """The model agent: its tools post through the runner, and what it decides
                to run waits for a human on the runner's approvals where approvals.mode
                says."""
                from agent.approval_gate import ApprovalGate
                from agent.history import History
                from agent.model import ModelAgent

                assert model is not None and runner.approvals is not None
                gate = ApprovalGate(runner.approvals, terminal, delegations=delegations,
                                    scheduler=scheduler)
                # (the sub-agent's tools were made before the gate could be: delegations
                # need them, the command agent the delegations, the runner the agent)
                subagent_tools.gate = gate
                toolbox = ToolBox(terminal, delegations=delegations,
                                  sender=MessageSender(runner, config.agent.home_channels),
                                  scheduler=scheduler, gate=gate)
                made = ModelAgent(config.agent, model, History(store.db), toolbox,
                                  command_agent, auto_title=config.sessions.auto_title)
                model_agents.append(made)
                return made

            runner = GatewayRunner(
                config, store, command_agent, pairing=Pairing(store.db),
                jobs_running=lambda: jobs.running, life=here,
                approvals=lambda runner: Approvals(store.db, runner, config.approvals,
                                                   clock=clock, life=here),
                agent_for=answering if model is not None else None)
            approvals = runner.approvals
            assert approvals is not None
            runner.session_end_listeners.append(approvals.end_session)
            for made in model_agents:
                life.add("agent", shutdown=made.close)
            runner.session_end_listeners.append(delegations.interrupt_session)
            # a resumed session's notices offered again: the router decides them now
            runner.session_resumed_listeners.append(lambda _resumed: outbox.wake())
            router = Router(outbox, store, runner, name=here.name)
            # the work of earlier processes is settled before anything is taken in, so
            # nothing this process starts can be mistaken for it
            await outbox.reconcile_claimed()
            recovered = await life.start("jobs", jobs.recover(), shutdown=jobs.detach)
            if instance is not None:  # its jobs stop when a conversation elsewhere asks
                asked = JobsElsewhere(jobs)
                asked.answer()
                life.add("jobs-asked", shutdown=asked.stop)
            lost = await life.start("delegations", delegations.recover(),
                                    shutdown=delegations.shutdown)
            # turns under way and delegations may finish (together) for shutdown.drain_*
            life.add("turns",
                     drain=lambda: _drain(runner, delegations, _drain_seconds(config, instance)))
            for adapter in adapters:
                runner.add_adapter(adapter)
            # what a stopped process had taken in is queued first, so a message arriving
            # once the platforms connect is answered after it, never before or twice
            runner.replay.hold()
            replayed = await runner.replay()
            await runner.inbound.prune(time.time() - INBOUND_KEEP_SECONDS)
            for adapter in adapters:  # (each stops receiving with the intake, below)
                await life.start(adapter.platform, adapter.connect(runner),
                                 shutdown=adapter.disconnect)
            runner.replay.release()
            # a turn waiting for a choice does not hold the stop up (approvals.release)
            pending_approvals = await life.start("approvals", approvals.start(),
                                                 stop=_async(approvals.release),
                                                 shutdown=approvals.stop)
            await life.start("router", router.start(), stop=router.stop,
                             shutdown=router.settle)
            await life.start("scheduler", scheduler.start(), stop=scheduler.stop)
            if instance is not None:  # what instances that are gone left
                from gateway.daemon.takeover import Takeover

                takeover = Takeover(instance, outbox, runner, jobs, delegations)
                await life.start("takeover", takeover.start(), stop=takeover.stop)
            store_watch = asyncio.create_task(watch_store(store.db), name="store-watch")
            life.add("store-watch", shutdown=_async(store_watch.cancel))
            # the newest part, so the first to stop: from the signal no platform is
            # polled and no message's turn begins
            life.add("intake", stop=lambda: _stop_intake(adapters, runner))
            for refused in platforms().refused:
                log.warning("platform_package_not_loaded", source=refused.source,
                            reason=refused.reason,
                            hint="reinstall or remove that package; the others work")
            log.info("gateway_started", platforms=[a.platform for a in adapters],
                     state_db=config.state_shown, jobs_reattached=recovered,
                     delegations_lost=lost, messages_replayed=replayed,
                     approvals_pending=pending_approvals, agent=config.agent.backend,
                     model=config.agent.model if model is not None else None,
                     event_loop=loop_name())
            yield Gateway(config, store, outbox, jobs, delegations, runner, router, scheduler,
                          life, instance)
        log.info("gateway_stopped")


async def _stop_intake(adapters: list[Adapter], runner: GatewayRunner) -> None:
    """The platforms first: what Telegram has not handed out waits there, and a
    Telegram poller or Discord session is let go for another instance to take at
    once. Then no turn begins: what was taken in and not begun — or still arrives, on
    a web tab open until its turn is done — is journaled, and on a shared store
    handed over to the other instances now (gateway/inbound/journal.py), each conversation's
    after its turn under way here; alone on its store, it is the next life's."""
    for adapter in adapters:
        try:
            await adapter.stop_receiving()
        except Exception:  # the others must still stop, and the turns be cut off
            log.exception("platform_stop_failed", platform=adapter.platform)
    runner.stop_accepting()
    await runner.hand_over_left()


def _drain_seconds(config: Config, instance: Instance | None) -> float:
    """How long turns in flight may finish once stopping. A fenced life has nothing to
    drain: what it would still say is withheld, a survivor answers for it, and its
    tabs should reconnect elsewhere at once."""
    if instance is not None and instance.ended is not None:
        return 0.0
    return config.shutdown.drain_timeout_seconds


async def _drain(runner: GatewayRunner, delegations: DelegationManager, seconds: float) -> None:
    await asyncio.gather(runner.drain(seconds), delegations.drain(seconds))


def _model_client(config: Config) -> ModelClient:
    from agent.model_client import ModelClient

    return ModelClient(config.agent)


def _model_subagent(config: Config, model: ModelClient, tools: ToolBox) -> SubAgent:
    from agent.model import model_subagent

    return model_subagent(config.agent, model, tools)


def settle_memory() -> None:
    """Once started: what start-up built lives as long as the process, so the cycle
    collector need not walk it again (gc.freeze), and young objects are collected less
    often — a busy router makes thousands a second (bench/route_throughput.py)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    _release_free_heap()


def _release_free_heap() -> None:
    """Give the heap start-up freed back to the system (glibc keeps it otherwise): an
    idle daemon's resident memory is then what it uses."""
    import ctypes  # (only here: the idle daemon does not keep it otherwise)

    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: glibc's
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def _async(step: Callable[[], object]) -> Callable[[], Awaitable[None]]:
    """A plain call as a lifecycle step."""
    async def run() -> None:
        step()
    return run


async def watch_store(db: StateDatabase, interval: float = STORE_CHECK_SECONDS) -> None:
    """Say, each minute until it is fixed, that the state database is broken."""
    broken = False
    while True:
        problem = await db.health(deep_within=0)
        if problem is not None:
            log.error("state_database_broken", problem=problem,
                      hint="nothing can be recorded: restore the state database and restart")
        elif broken:
            log.info("state_database_usable_again")
        broken = problem is not None
        await asyncio.sleep(interval)


async def _wait_for_platforms(gw: Gateway, timeout: float) -> list[str]:
    """Wait for every adapter to connect; return the ones that have not, after ``timeout``."""
    adapters = list(gw.runner.adapters.values())
    waits = [asyncio.ensure_future(a.wait_connected()) for a in adapters]
    await asyncio.wait(waits, timeout=timeout)
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    return [a.platform for a in adapters if not a.connected]


async def run_daemon(config: Config) -> None:
    """Run until SIGINT or SIGTERM, then stop cleanly; a second signal stops at once."""
    raise_open_file_limit()  # a pidfd per running job
    notifier = Notifier()
    notifier.status("starting: opening the state database")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if not stop.is_set():
            stop.set()
            return
        log.warning("second_signal_stopping_now")
        if main is not None:
            main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    started_at = time.time()
    ended: str | None = None
    configure_tracing(config.telemetry)  # (off, and nothing imported, without an endpoint)
    exported: OtlpMetrics | None = None
    try:
        async with running_gateway(config) as gw:
            exported = export_metrics(config.telemetry, gw.runner.metrics.registry)
            refreshing = (asyncio.create_task(_refresh_gauges(gw), name="metrics-refresh")
                          if exported is not None else None)
            write_status(config.home_path, {}, "starting", started_at)
            notifier.status("starting: connecting platforms")
            missing = await _wait_for_platforms(gw, READY_WAIT)
            if missing:
                log.warning("platforms_not_connected_yet", platforms=missing)
            platforms = ", ".join(gw.runner.adapters)
            settle_memory()
            notifier.ready(f"serving {platforms}" + (
                f" ({', '.join(missing)} still connecting)" if missing else ""))
            notifier.start_watchdog()
            status = asyncio.create_task(keep_status(
                config.home_path, lambda: {n: a.connected for n, a in gw.runner.adapters.items()},
                started_at))
            back_online = BackOnline(gw.runner, gw.store.db)
            gw.runner.platform_listeners.append(back_online.platform_connected)
            await back_online.announce()
            ended = await _until_stopped(stop, gw.instance)
            if refreshing is not None:
                refreshing.cancel()
            status.cancel()
            await asyncio.gather(status, return_exceptions=True)
            write_status(config.home_path, {n: a.connected for n, a in gw.runner.adapters.items()},
                         "stopping", started_at)
            log.info("gateway_stopping")
            if ended is not None:  # before anything that may wait on the store (down?)
                await _close_listeners(gw)
            notifier.stopping("stopping: telling conversations, finishing turns in flight")
            # take nothing new first — no tab, no message's turn, no schedule run, no
            # notice — so every turn that runs is one that was told
            await gw.life.stop()
            await announce_restart(gw.runner, gw.store.db,
                                   places_in_progress(gw.runner, gw.jobs.running_routes()))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        if exported is not None:
            await asyncio.to_thread(exported.stop)  # the last reading goes out
        await asyncio.to_thread(tracing.shutdown)  # what spans are buffered go out
        await notifier.close()
        if config.home_path.exists():
            write_status(config.home_path, {}, "stopped", time.time())
    if ended is not None:
        raise InstanceEnded(f"this instance stopped taking part: {ended}; it starts again "
                            f"under a new epoch")


async def _refresh_gauges(gw: Gateway) -> None:
    """The gauges a ``/metrics`` scrape refreshes, refreshed for the OTLP export too."""
    while True:
        try:
            await gw.runner.metrics.render(gw.store.db, gw.runner.adapters,
                                           gw.runner.jobs_running())
        except Exception as exc:  # a reading missed: the next one is in a few seconds
            log.info("metrics_refresh_failed", error=str(exc))
        await asyncio.sleep(export_seconds())


async def _close_listeners(gw: Gateway) -> None:
    """A fenced life has nothing to drain: its web tabs are closed with 1001 and its
    port closed at once (every adapter that ``listens``), so the pages reconnect to
    another instance now, not once the rest has stopped (which may wait on a store that
    is out of reach)."""
    for adapter in gw.runner.adapters.values():
        if adapter.listens:
            await adapter.disconnect()


async def _until_stopped(stop: asyncio.Event, instance: Instance | None) -> str | None:
    """Wait for a stop signal — or, on a shared store, for this life to end; say why."""
    if instance is None:
        await stop.wait()
        return None
    signalled = asyncio.ensure_future(stop.wait())
    ended = asyncio.ensure_future(instance.wait_ended())
    await asyncio.wait({signalled, ended}, return_when=asyncio.FIRST_COMPLETED)
    for waiting in (signalled, ended):
        waiting.cancel()
    if stop.is_set():
        return None
    why = instance.ended
    log.error("instance_ended_stopping", reason=why,
              hint="the service manager starts it again (systemd: Restart=on-failure)")
    return why
