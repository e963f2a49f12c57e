"""The OpenAI-compatible gateway: a lean ASGI app for /v1/ beside Django in the portal's router.

Per request: the client address is held to its rate, then the bearer token and the model name
are resolved from in-process tables (no database row; a made-up token costs none either), into
one value (gateway.request.GatewayRequest) that each step takes: limits are checked in one Redis
round trip, the engine is chosen by the cache policy's `choose_engine`
(where the version is hot, then warm, then least loaded), a cold version is loaded once for all
its waiters (single-flight, through the fleet's controller) while other requests go on, and the
reply passes through as it comes, measured per adapter version.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from django.conf import settings
from redis import asyncio as aioredis
from redis.exceptions import RedisError

from core import telemetry
from core.client_ip import address_behind_proxies
from core.errors import ApplicationError
from core.json_depth import deeper_than
from gateway import limits, tracing
from gateway.address_limit import AddressLimit
from gateway.background import stop_if_cancelled, stop_tasks
from gateway.budgets import Spans, claim_for, with_headers
from gateway.class_policy import engine_priority
from gateway.conversations import NO_TURN, turn_of
from gateway.errors import (
    GatewayError,
    limits_unavailable,
    model_not_found,
    no_slot,
    too_many,
    unauthorized,
    unavailable,
)
from gateway.exchange import FAILED, GONE, SENT, STALE, Exchange, Outcome
from gateway.fairness import Ask, FairSlots, NoSlot
from gateway.invalidation import CHANGED_CHANNEL, RESIDENCY_KEY, ROUTES_KEY
from gateway.lanes import LaneWatch, background_room, engine_slots
from gateway.offloop import off_loop, off_loop_waiting
from gateway.pin_guard import PinGuardLink
from gateway.recorder import Measurement, Recorder
from gateway.release_samples import SHADOW_PARAMS, ReleaseSamples
from gateway.replicas import ReplicaLease
from gateway.request import GatewayRequest
from gateway.request_schema import check_request, forwarded_max_tokens
from gateway.routes import (
    Caller,
    EngineInfo,
    Route,
    RouteTable,
    Target,
    build_table,
    cache_salt,
    default_plan,
    parse_token,
    residency_map,
)
from gateway.token_lookup import RoutesGeneration
from gateway.upstream import EnginePool
from workers.cache_policy import EngineChoice, Tier, choose_engine

log = logging.getLogger(__name__)
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
JSON_HEADERS = [(b"content-type", b"application/json")]
# The deepest request body taken: under orjson's 254 levels for dumps (the gateway measures tool
# and schema definitions with it, and sends the body on with it), far over any real request.
MAX_BODY_DEPTH = 128


def gateway_redis(client_name: str) -> aioredis.Redis:
    """The gateway's Redis client (bench.script_link measures with the same one).

    Named, so that an operator (and a test) can tell a replica's connections apart. Bounded
    waits: a stalled Redis must become a 503 within seconds, not hold requests. A bounded pool
    that waits for a free connection (as long as a command may take) rather than raise past its
    size under a burst."""
    return aioredis.Redis.from_pool(
        aioredis.BlockingConnectionPool.from_url(
            settings.REDIS_URL,
            max_connections=settings.GATEWAY_REDIS_MAX_CONNECTIONS,
            timeout=settings.GATEWAY_REDIS_TIMEOUT_SECONDS,
            client_name=client_name,
            socket_timeout=settings.GATEWAY_REDIS_TIMEOUT_SECONDS,
            socket_connect_timeout=settings.GATEWAY_REDIS_TIMEOUT_SECONDS,
        )
    )


class Gateway:
    def __init__(self) -> None:
        self.table = RouteTable()
        self.redis = gateway_redis(f"lp-gateway-{os.getpid()}")
        self.recorder = Recorder(self.redis)
        self.samples = ReleaseSamples(self.redis, settings.GATEWAY_RELEASE_SAMPLES_BUFFER)
        # Release samples are taken systematically, not by a coin per reply: an (alias,
        # version)'s credit grows by the plan's share per reply and a sample is taken each time
        # it passes 1, so a replica keeps exactly that share of each version's replies (a coin
        # puts 600 replies at 10 % anywhere within 7.6-12.4 %), from a random starting point.
        self.sample_credit: dict[tuple[int, int], float] = {}
        self.scripts = limits.Scripts(self.redis)
        self.lease = ReplicaLease(self.redis, self.scripts)
        self.engines = EnginePool()
        # Engines this replica could not reach: name -> (until, when, as a Unix time). The mark
        # keeps requests off the engine until the fleet has seen it answer since (the tables'
        # EngineInfo.seen_at), or GATEWAY_ENGINE_COOLDOWN_SECONDS pass: the fleet's state is the
        # one that says when an engine is usable again (engine_usable).
        self.failed: dict[str, tuple[float, float]] = {}
        self._probes: set[asyncio.Task[None]] = set()
        self.loading: dict[tuple[str, str], asyncio.Future[float]] = {}
        self.exchanges: dict[str, set[Exchange]] = {}  # engine -> requests waiting on it
        self._gens = (-1, -1)
        self._checked = 0.0
        self._refresh = asyncio.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None
        self._leaser: asyncio.Task[None] | None = None
        self._settler: asyncio.Task[None] | None = None
        self.lanes = LaneWatch(self.redis)
        self._lane_reader: asyncio.Task[None] | None = None
        self.spans = Spans()  # budgets' current windows
        self._refresher: asyncio.Task[None] | None = None
        self._listening = False  # subscribed to change messages (CHANGED_CHANNEL)
        self._stale = True
        self.fair = FairSlots(settings.GATEWAY_FAIR_SHARED_WINDOW_SECONDS)
        self.pin_guard = PinGuardLink(self.redis)
        self.address_limit = AddressLimit(
            settings.GATEWAY_ADDRESS_RATE_PER_SECOND, settings.GATEWAY_ADDRESS_BURST
        )
        self.routes_generation = RoutesGeneration(self.redis)
        self.table_checks = 0  # times a request took the tables' lock (tests read it)

    # --- tables ---------------------------------------------------------------------------

    async def fresh_table(self, *, force_check: bool = False) -> RouteTable:
        """The tables, re-read when a change message came (see _listen_forever), when they are
        older than GATEWAY_REFRESH_SECONDS, or on every request while no subscription is live."""
        if (
            not force_check
            and not self._stale
            and time.monotonic() - self._checked < settings.GATEWAY_REFRESH_SECONDS
        ):
            return self.table
        async with self._refresh:
            self.table_checks += 1
            if (
                not force_check
                and not self._stale
                and time.monotonic() - self._checked < settings.GATEWAY_REFRESH_SECONDS
            ):
                return self.table
            self._stale = not self._listening  # a message from here on marks it stale again
            raw = await self.redis.mget(ROUTES_KEY, RESIDENCY_KEY)
            gens = (int(raw[0] or 0), int(raw[1] or 0))
            if gens[0] != self._gens[0] or self.table.generation < 0:
                self.table = await off_loop(build_table)(gens[0])
                self._leave_down_engines()
            elif gens[1] != self._gens[1]:
                self.table.residency = await off_loop(residency_map)()
            self._gens = gens
            self._checked = time.monotonic()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_forever())
        if self._listener is None or self._listener.done():
            self._listener = asyncio.create_task(self._listen_forever())
        if self._leaser is None or self._leaser.done():
            self._leaser = asyncio.create_task(self.lease.run_forever())
        if self._settler is None or self._settler.done():
            self._settler = asyncio.create_task(self.scripts.budgets.run_forever())
        if self._lane_reader is None or self._lane_reader.done():
            engines = lambda: [e.name for e in self.table.engines]  # noqa: E731 - the newest
            self._lane_reader = asyncio.create_task(self.lanes.run_forever(engines))
        return self.table

    async def _listen_forever(self) -> None:
        """Mark the tables stale when any replica's change message arrives. While subscribed,
        a request reads nothing from Redis for staleness; when the subscription drops, every
        request checks the counters until it is back."""
        while True:
            stop_if_cancelled()  # a cancellation the last subscription's library swallowed
            pubsub = self.redis.pubsub()
            try:
                await pubsub.subscribe(CHANGED_CHANNEL)
                while True:
                    # Bounded reads, not listen()'s endless one: a cancellation a library
                    # swallows mid-read is seen within a second (gateway.background).
                    message = await pubsub.get_message(timeout=1.0)
                    stop_if_cancelled()
                    if message is None:
                        continue
                    if message["type"] == "subscribe":  # confirmed: from here no change is missed
                        self._listening = True
                    self._stale = True  # the confirmation too: a change may precede it
                    self._refresh_for_waiting()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - serving goes on, checking on every request
                stop_if_cancelled()
                log.warning("gateway change subscription dropped", exc_info=True)
            finally:
                self._listening = False
                self._stale = True
                await pubsub.aclose()
            await asyncio.sleep(1.0)

    def _refresh_for_waiting(self) -> None:
        """A change came while requests wait on engines: read the tables now, not at the next
        request, so that what waits on an engine the prober just marked down stops waiting."""
        if not any(self.exchanges.values()):
            return
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        try:
            await self.fresh_table()
        except Exception:  # noqa: BLE001 - the next request reads them again
            stop_if_cancelled()
            log.warning("gateway: could not re-read the tables", exc_info=True)

    def _leave_down_engines(self) -> None:
        """Requests waiting on an engine the prober marked down stop waiting: a stalled core
        keeps its connections open and answers nothing (gateway.exchange, engine_gone)."""
        for name in self.table.down:
            waiting = list(self.exchanges.get(name, ()))
            if not waiting:
                continue
            log.warning(
                "gateway: engine %s is down: %d request(s) on it stop waiting", name, len(waiting)
            )
            for exchange in waiting:
                exchange.engine_gone()

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(settings.GATEWAY_MEASUREMENT_FLUSH_SECONDS)
            stop_if_cancelled()  # a cancellation the last flush's library swallowed
            try:
                await self.recorder.flush()
            except Exception:  # noqa: BLE001 - measurements are best effort, serving is not
                stop_if_cancelled()
                log.warning("could not flush gateway measurements", exc_info=True)
            try:
                await self.samples.flush()
            except Exception:  # noqa: BLE001 - release samples are a sample: dropped
                stop_if_cancelled()
                log.warning("could not send release samples", exc_info=True)
            try:
                await self.scripts.class_counts.flush(self.redis)
            except Exception:  # noqa: BLE001 - kept for the next flush
                stop_if_cancelled()
                log.warning("could not send the service classes' counts", exc_info=True)

    async def aclose(self) -> None:
        """A replica's orderly end (and each test's own gateway): stop the background loops, send
        the measurements still held, close the engine sessions and Redis connections. An event
        loop that closes with a loop still running waits for it forever (gateway.background)."""
        await stop_tasks(
            [
                self._flusher,
                self._listener,
                self._leaser,
                self._refresher,
                self._settler,
                self._lane_reader,
                *self._probes,
            ]
        )
        await self.routes_generation.aclose()
        try:
            await self.recorder.flush()
        except Exception:  # noqa: BLE001 - measurements are best effort, the shutdown is not
            log.warning("could not flush gateway measurements at close", exc_info=True)
        try:
            await self.samples.flush()
        except Exception:  # noqa: BLE001 - release samples are a sample, the shutdown is not
            log.warning("could not send release samples at close", exc_info=True)
        try:
            await self.scripts.class_counts.flush(self.redis)
        except Exception:  # noqa: BLE001 - metrics are best effort, the shutdown is not
            log.warning("could not send the service classes' counts at close", exc_info=True)
        try:
            await self.scripts.budgets.flush()
        except Exception:  # noqa: BLE001 - what is not settled stays reserved (never under)
            log.warning("could not settle budgets at close", exc_info=True)
        await self.engines.aclose()
        await self.scripts.link.aclose()
        await self.redis.aclose()

    # --- ASGI -----------------------------------------------------------------------------

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        reply = ReplyState(send)
        try:
            path, method = scope["path"], scope["method"]
            self.admit_address(scope)
            if path == "/v1/models" and method == "GET":
                await self.models(scope, reply.send)
            elif path in PATHS and method == "POST":
                await self.generate(scope, receive, reply.send, PATHS[path])
            elif path in PATHS or path == "/v1/models":
                raise GatewayError(405, f"{method} is not allowed here.", code="method_not_allowed")
            else:
                raise GatewayError(404, f"No route {path}.", code="not_found")
        except GatewayError as err:
            await respond(send, err.status, err.body(), err.headers)
        except RedisError:
            # Limits, fair slots and the tables' freshness live in Redis: without it no tenant's
            # share can be enforced, so the gateway fails closed (docs/reliability.md).
            log.warning("gateway: Redis unavailable", exc_info=True)
            await reply.fail(limits_unavailable())

    def admit_address(self, scope: dict[str, Any]) -> None:
        """The per-address limit, before the token is looked at (gateway.address_limit)."""
        client = scope.get("client") or ("", 0)
        address = address_behind_proxies(str(client[0]), header_of(scope, b"x-forwarded-for"))
        wait = self.address_limit.retry_after(address, time.monotonic())
        if wait:
            raise too_many(
                f"Too many requests from your address; retry in {wait} s.",
                retry_after=wait,
                code="address_rate_limited",
            )

    async def caller(self, scope: dict[str, Any]) -> tuple[Caller, RouteTable]:
        """The token's caller, refused from the tables alone when it is unknown, wrong or
        expired: no database lookup, no wait on the tables' lock (gateway.token_lookup)."""
        header = header_of(scope, b"authorization")
        parsed = parse_token(header) if header else None
        if parsed is None:
            raise unauthorized()
        prefix, secret = parsed
        if prefix not in self.table.callers:
            await self._look_again()
        found = self.table.callers.get(prefix)
        if found is None or not found.valid(secret, time.time()):
            scoped_out = self.table.scoped_out.get(prefix)
            if found is None and scoped_out is not None and scoped_out.valid(secret, time.time()):
                raise GatewayError(
                    403,
                    "This token lacks the 'inference' scope.",
                    code="insufficient_scope",
                    err_type="permission_error",
                )
            raise unauthorized()
        table = await self.fresh_table()
        found = table.callers.get(prefix)  # revoked since the tables above were read
        if found is None or not found.valid(secret, time.time()):
            raise unauthorized()
        return found, table

    async def _look_again(self) -> None:
        """A prefix the tables lack: re-read them only when the routes moved since (a token
        minted a moment ago), as told by one shared Redis read taken after the request came."""
        generation = await self.routes_generation.read_after_now()
        if generation > self._gens[0]:
            self._stale = True
            await self.fresh_table()

    async def models(self, scope: dict[str, Any], send: Send) -> None:
        caller, table = await self.caller(scope)
        data = []
        for name, _route, tenant_id in table.names_for(caller.tenant_ids):
            own = tenant_id is not None and len(caller.tenant_ids) > 1
            shown = f"{table.tenants[tenant_id]}/{name}" if own and tenant_id is not None else name
            data.append(
                {
                    "id": shown,
                    "object": "model",
                    "created": int(table.built_at),
                    "owned_by": table.tenants.get(tenant_id, "platform")
                    if tenant_id
                    else "platform",
                }
            )
        await respond(send, 200, orjson.dumps({"object": "list", "data": data}))

    def resolve(self, caller: Caller, table: RouteTable, model: object) -> tuple[Route, int]:
        """The route a model name means for this caller, and the tenant the request runs as.

        Every form resolves inside the caller's reach: `tenant/name` for a tenant it reaches,
        else the whole name in its home tenant (bare names, and base-model names that hold a
        `/`). The base model is served as that tenant too (limited, billed, pooled as it): a
        caller that reaches no tenant gets nothing, and a name outside reach is not found."""
        if not isinstance(model, str) or not model:
            raise GatewayError(400, "`model` is required.", code="missing_model", param="model")
        readings: list[tuple[int, str]] = []
        if "/" in model:
            slug, _, name = model.partition("/")
            tenant_id = table.tenant_ids.get(slug)
            if tenant_id is not None and tenant_id in caller.tenant_ids:
                readings.append((tenant_id, name))
        home = caller.home_tenant_id
        if home is not None:
            readings.append((home, model))
        for tenant_id, name in readings:
            route = table.route_for(tenant_id, name)
            if route is not None:
                return route, tenant_id
        raise model_not_found(model)

    # --- one request: resolve, admit, choose, forward, settle (gateway.request) -----------

    async def generate(
        self, scope: dict[str, Any], receive: Receive, send: Send, kind: str
    ) -> None:
        """Resolve: the caller, its body and the model it names, as one request to serve."""
        started = time.perf_counter()
        caller, table = await self.caller(scope)
        payload = payload_of(await read_body(receive, settings.GATEWAY_MAX_BODY_BYTES))
        route, tenant_id = self.resolve(caller, table, payload.get("model"))
        target = pick(route.targets) if route.targets else None
        await self.serve_admitted(
            GatewayRequest(
                kind,
                payload,
                route,
                target,
                table,
                tenant_id=target.tenant_id if target else tenant_id,
                send=send,
                started=started,
                token_id=caller.token_id,
                caller_traceparent=header_of(scope, b"traceparent") if telemetry.tracer() else "",
            )
        )

    async def serve_admitted(self, request: GatewayRequest) -> None:
        """The path of every request once its caller and model are known, from the API
        (generate), from a signed-in user's playground prompt (gateway.playground) and from an
        eval run's cases (`background`: they wait behind live requests for an engine slot):
        admit, serve, and release what the admission holds, whatever happened."""
        with tracing.request_span(request):
            with tracing.step(request, "lora_portal.admission"):
                self.admit(request)
            try:
                await self.serve(request)
            finally:
                await request.admission.release()

    def admit(self, request: GatewayRequest) -> None:
        """The schema check, the tenant's cache salt, the budgets' claim and the admission's
        terms: rate, the tenant's and the version's requests in flight, the engine's in-flight
        count, all by the request's weight (counted in Redis once an engine is chosen)."""
        table, tenant_id, route = request.table, request.tenant_id, request.route
        plan = table.plans.get(tenant_id) or default_plan()
        checked = request.checked = check_request(request.kind, request.payload, plan)
        # The tenant's own prefix cache: its prompts never hit, nor time, another tenant's.
        request.payload["cache_salt"] = table.salts.get(tenant_id) or cache_salt(tenant_id)
        rules = table.budgets
        applying = rules.applying(tenant_id, request.token_id, route.name if route.alias else None)
        claim = None
        if applying:
            weights = rules.weights_for(request.base_model_id)
            claim = claim_for(applying, weights, self.spans, checked)
            request.send = with_headers(request.send, claim)
        terms = limits.Terms(
            tenant_id=tenant_id,
            rpm_limit=table.rpm.get(tenant_id, 0),
            in_flight_cap=table.in_flight_caps.get(tenant_id, 0),
            target=request.target,
            requested=request.payload.get("model"),
            weight=checked.weight,
            background=request.background,
            live_headroom=settings.GATEWAY_LIVE_HEADROOM,
            service_class=table.service_class(tenant_id, request.token_id)
            if settings.GATEWAY_SERVICE_CLASSES
            else "",
            class_plans=table.class_plans,
            class_headroom=settings.GATEWAY_CLASS_HEADROOM,
        )
        request.admission = limits.Admission(self.scripts, terms, claim)

    async def serve(self, request: GatewayRequest) -> None:
        """Choose an engine and forward; a request that reached nothing of its caller there (a
        connection refused, an engine marked down, an adapter the engine no longer held) moves
        to the next engine."""
        payload = request.payload
        if request.checked.stream:  # the gateway counts tokens from the usage chunk, asked or not
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }
        while True:
            try:
                with tracing.step(request, "lora_portal.engine_choice"):
                    engine, request.tier = self.choose(request)
                    tracing.chosen(request, engine)
            except GatewayError:
                if await self.tables_moved(request):
                    continue  # an engine may have come back: choose from the newest tables
                await self.wait_for_room(request)  # or raise why no engine serves it
                continue
            request.load_ms = 0.0
            # A background request counts where it goes from its choice on: the run's next
            # ones, chosen while this one is admitted, pack by it (gateway.lanes).
            with self.lanes.holding(engine.name, request.checked.weight, request.background):
                if request.tier == Tier.NONE and not await self.load_there(engine, request):
                    continue  # its load was refused there: the next choice
                sent = await self.forward(engine, request)
            if sent == SENT:
                return
            await request.admission.leave_engine()
            if not request.left(engine.name, sent):
                request.table = self.table  # the newest: an engine may have gone or come

    async def tables_moved(self, request: GatewayRequest) -> bool:
        """Before a request is refused for want of an engine, once: whether the tables moved
        since it read them (Redis's generations, one read), and then the newest. A replica
        trusts its tables until a change message comes; an engine the fleet has just brought
        back is announced at its commit, and a request that arrives before the message does
        would otherwise be refused from the tables of a moment ago."""
        if request.rechecked:
            return False
        request.rechecked = True
        gens = self._gens
        table = await self.fresh_table(force_check=True)
        if self._gens == gens and table is request.table:
            return False
        request.table = table
        return True

    async def load_there(self, engine: EngineInfo, request: GatewayRequest) -> bool:
        """Load the request's version on the engine chosen, where it was not (limits first: a
        refused request loads nothing); False when the load was refused there."""
        assert request.target is not None  # the base model is on every engine of it
        with tracing.step(request, "lora_portal.admission.limits"):
            await request.admission.admit()
        try:
            with tracing.step(
                request,
                "lora_portal.adapter_load",
                **{"lora_portal.single_flight_key": f"{engine.name}/{request.target.served_name}"},
            ):
                request.load_ms = await self.load(engine, request)
        except GatewayError as err:
            if err.code == "model_not_found":
                raise
            request.load_refused(engine.name, err)  # no room now, or it failed: another one
            return False
        request.tier = Tier.COLD
        return True

    async def wait_for_room(self, request: GatewayRequest) -> None:
        """No engine to choose. When engines refused the load for room, a bounded wait for
        one to free a slot (GATEWAY_LOAD_ROOM_WAIT_SECONDS), then the choice again; else the
        last refusal, or 503."""
        if await request.wait_for_room(settings.GATEWAY_LOAD_ROOM_WAIT_SECONDS):
            return
        if not request.load_error:
            # Say why each engine was left out (a load test's lone 503 could not be traced
            # without it): tried here, or kept out by an earlier failure.
            log.warning(
                "gateway: no engine for %s: %s; cooling down: %s",
                request.payload.get("model"),
                request.left_out or "none tried",
                sorted(n for n, (t, _) in self.failed.items() if t > time.monotonic()),
            )
        raise request.load_error or unavailable(
            "No engine can serve this model right now; try again shortly."
        ) from None

    def choose(self, request: GatewayRequest) -> tuple[EngineInfo, Tier]:
        """The engine for the request among its usable candidates, and where its version is
        there (Tier.BASE for the base model)."""
        now = time.monotonic()
        table, target, tenant_id = request.table, request.target, request.tenant_id
        base = request.base_model_id
        # The base model runs in its tenant's pool, as the tenant's adapters do: a tenant's
        # base-model traffic never lands on another tenant's dedicated pool.
        pool = target.pool if target else table.pools.get(tenant_id, settings.DEFAULT_POOL)
        tried = request.tried
        candidates = [
            e
            for e in table.engines
            if e.base_model_id == base
            and e.name not in tried
            and self.engine_usable(e, now)
            and e.pool == pool
            and (target is None or e.max_lora_rank >= target.rank)
        ]
        if not candidates:
            raise unavailable("No engine can serve this model right now; try again shortly.")
        if target is None:  # every engine of the base model holds it
            gpu = Tier.GPU
            name = choose_engine(
                [self._choice(e, gpu, 0, tenant_id) for e in candidates],
                background=request.background,
            )
            return next(e for e in candidates if e.name == name), Tier.BASE
        held = table.residency.get(target.served_name, {})
        chosen = self.choose_for_version(
            candidates, held, table, tenant_id, background=request.background
        )
        return chosen, held.get(chosen.name, Tier.NONE)

    def choose_for_version(
        self,
        candidates: list[EngineInfo],
        held: dict[str, Tier],
        table: RouteTable,
        tenant_id: int,
        *,
        background: bool = False,
    ) -> EngineInfo:
        """The cache policy's choice among `candidates` for a version (hot, then warm, then the
        least loaded; workers.cache_policy.choose_engine). bench/round_robin_asgi.py replaces
        it for the routing benchmark's baseline."""
        counts = resident_counts(table.residency)
        absent = Tier.NONE
        choices = [
            self._choice(
                e,
                held.get(e.name, absent),
                max(0, e.max_cpu_loras - counts.get(e.name, 0)),
                tenant_id,
            )
            for e in candidates
        ]
        name = choose_engine(choices, background=background)
        return next(e for e in candidates if e.name == name)

    async def load(self, engine: EngineInfo, request: GatewayRequest) -> float:
        """Single-flight: the first request for a cold version loads it; the rest await that.
        Returns the wait in ms."""
        assert request.target is not None
        key = (engine.name, request.target.served_name)
        future = self.loading.get(key)
        tracing.mark(request, "lora_portal.single_flight_leader", future is None)
        if future is not None:
            return float(await asyncio.shield(future))
        future = asyncio.get_running_loop().create_future()
        self.loading[key] = future
        try:
            waited_ms = await self._load_once(engine, request)
            future.set_result(waited_ms)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it; none waiting is fine too
            raise
        finally:
            self.loading.pop(key, None)
        return float(waited_ms)

    async def _load_once(self, engine: EngineInfo, request: GatewayRequest) -> float:
        """The fleet's load of the request's version on `engine`. A load this request leads (the
        first here, and the first of every gateway replica: workers.desired.request_load) writes
        it into the pool's demand history, unless an earlier try of the same request did."""
        target = request.target
        assert target is not None
        try:
            result = await off_loop_waiting(load_on_engine)(
                target.version_id, engine.name, not request.caused_load
            )
        except ApplicationError as exc:
            if exc.code == "fleet.not_servable":  # disabled a moment ago
                raise model_not_found(target.label) from None
            raise unavailable(exc.message, code="adapter_load_failed") from None
        request.caused_load = request.caused_load or result.leader
        if result.no_room:
            raise unavailable(
                f"No engine has room for {target.label} now: every slot it could take "
                "is serving other requests. Try again shortly.",
                code="engine_busy",
                retry_after=1,
            )
        if not result.ok:
            raise unavailable(
                f"Could not load {target.label} on an engine: {result.error}",
                code="adapter_load_failed",
            )
        self.table.residency.setdefault(target.served_name, {})[engine.name] = Tier.GPU
        return float(result.waited_ms)

    async def forward(self, engine: EngineInfo, request: GatewayRequest) -> str:
        """Count the request on the engine (Redis), wait for a fair slot there, then send:
        SENT, or FAILED / STALE / GONE before anything reached the caller."""
        payload, checked = request.payload, request.checked
        payload["model"] = (
            request.target.served_name if request.target else engine.served_model_name
        )
        max_tokens = forwarded_max_tokens(checked, engine.max_model_len)
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if settings.GATEWAY_SERVICE_CLASSES:  # the engine schedules by class (docs/classes.md)
            payload["priority"] = engine_priority(
                request.admission.service_class, request.table.class_plans, request.background
            )
        capacity = engine_slots(engine)
        # Queued requests count in flight for the controller too: no eviction under them.
        # Every request counts in the engine's load by its lane, where a background one
        # is held while live ones would lose their headroom (GATEWAY_LIVE_HEADROOM).
        with tracing.step(request, "lora_portal.admission.limits"):
            await request.admission.admit(
                engine.name, max_loras=engine.max_loras, held=self.pin_guard, capacity=capacity
            )
        # The wait for a slot is spent from the request's time budget.
        wait_s = settings.GATEWAY_REQUEST_TIMEOUT_SECONDS - (time.perf_counter() - request.started)
        ask = Ask(
            request.tenant_id,
            checked.weight,
            max(0.0, wait_s),
            request.background,
            request.admission.service_class,
            request.table.class_plans,
        )
        waiting = tracing.start(request, "lora_portal.admission.slot")
        try:
            async with self.fair.slot(engine.name, capacity, ask):
                tracing.end(waiting)
                return await self.exchange(engine, request)
        except NoSlot as refused:  # only the admission to a slot raises it
            raise no_slot(
                engine.name, refused.weight, refused.share, refused.capacity, refused.over_share
            ) from None
        finally:
            tracing.end(waiting)

    async def exchange(self, engine: EngineInfo, request: GatewayRequest) -> str:
        """Send to one engine and relay its reply (gateway.exchange says whose fault a failure
        is). FAILED (no connection) and GONE (marked down) mark the engine; STALE drops the
        residency entry that sent the request there."""
        if engine.name in self.table.down:  # went down while this request waited for a slot
            self.mark_failed(engine)
            return GONE
        exchange = Exchange(
            self.engines,
            request.send,
            budget_s=settings.GATEWAY_REQUEST_TIMEOUT_SECONDS,
            write_deadline_s=settings.GATEWAY_WRITE_DEADLINE_SECONDS,
            started=request.started,
        )
        exchange.keep_reply(self.sample_bytes(request))
        path = "/v1/chat/completions" if request.kind == "chat" else "/v1/completions"
        body = orjson.dumps(request.payload)
        target = request.target
        waiting = self.exchanges.setdefault(engine.name, set())
        waiting.add(exchange)
        try:
            with tracing.engine_call(request, engine):
                exchange.headers = tracing.engine_headers(request)
                outcome = await exchange.run(
                    engine, path, body, request.checked, target is not None
                )
                tracing.answered(request, outcome)
        finally:
            waiting.discard(exchange)
        if outcome.sent in (FAILED, GONE):
            self.mark_failed(engine)
        elif outcome.sent == STALE and target is not None:  # our residency was stale
            request.table.residency.get(target.served_name, {}).pop(engine.name, None)
        elif outcome.sent == SENT:
            with tracing.step(request, "lora_portal.settle"):
                self.settle(engine, request, outcome)
        return outcome.sent

    def sample_bytes(self, request: GatewayRequest) -> int:
        """How much of this reply to keep for a release plan's live checks: the plan's share of
        an alias's live requests (from the route tables), 0 for the rest."""
        share = request.route.sample_share
        if not share or request.background or request.target is None:
            return 0
        key = (request.route.alias_id, request.target.version_id)
        credit = self.sample_credit.get(key)
        credit = (random.random() if credit is None else credit) + share
        if credit < 1.0:
            self.sample_credit[key] = credit
            return 0
        self.sample_credit[key] = credit - 1.0
        return settings.GATEWAY_RELEASE_SAMPLE_MAX_BYTES

    def keep_sample(self, request: GatewayRequest, target: Target, body: bytes) -> None:
        """The reply is delivered: only an append to a bounded buffer, sent by the flush loop."""
        self.samples.offer(
            alias_id=request.route.alias_id,
            version_id=target.version_id,
            at=time.time(),
            body=body,
            prompt=request.payload.get("messages") or request.payload.get("prompt"),
            params={k: request.payload[k] for k in SHADOW_PARAMS if k in request.payload},
            token_id=request.token_id,
        )

    def settle(self, engine: EngineInfo, request: GatewayRequest, outcome: Outcome) -> None:
        """What the engine answered: the budget's tokens (settled at the admission's release)
        and the request's measurement."""
        done = time.perf_counter()
        started, target, tenant_id = request.started, request.target, request.tenant_id
        if request.admission.budget is not None:
            request.admission.budget.delivered_tokens(
                outcome.prompt_tokens, outcome.completion_tokens
            )
        ok = outcome.ok
        if ok and outcome.body is not None and target is not None:
            self.keep_sample(request, target, outcome.body)
        self.recorder.add(
            Measurement(
                tenant=request.table.tenants.get(tenant_id, ""),
                tenant_id=tenant_id,
                adapter=target.adapter if target else "",
                version=target.label if target else engine.served_model_name,
                version_id=target.version_id if target else None,
                pool=target.pool if target else "",
                served_name=target.served_name if target else "",
                engine=engine.name,
                served_from=request.tier,
                ok=ok,
                caller_fault=outcome.caller_fault,
                ttft_ms=(outcome.first_token_at - started) * 1000
                if ok and outcome.first_token_at
                else None,
                e2e_ms=(done - started) * 1000,
                prompt_tokens=outcome.prompt_tokens,
                completion_tokens=outcome.completion_tokens,
                load_ms=request.load_ms,
                caused_load=request.caused_load,
                service_class=request.admission.service_class,
                at=time.time(),
                turn=turn_of(request.payload.get("messages"), tenant_id, target.served_name)
                if request.kind == "chat" and target is not None
                else NO_TURN,
                trace_id=tracing.sampled_trace_id(request),
            )
        )

    def _choice(
        self, engine: EngineInfo, where: Tier, free_cpu_slots: int, tenant_id: int
    ) -> EngineChoice:
        return EngineChoice(
            engine=engine.name,
            where=where,
            free_cpu_slots=free_cpu_slots,
            in_flight=self.fair.load(engine.name),
            capacity=engine.capacity,
            others_rate=self.fair.others_rate(engine.name, tenant_id),
            background=self.lanes.background(engine.name),
            background_room=max(0, background_room(engine) - self.lanes.own.get(engine.name, 0)),
        )

    def engine_usable(self, engine: EngineInfo, now: float) -> bool:
        """Not marked by this replica, or the fleet has seen the engine answer since the mark
        (an engine restarted and brought back takes requests at once), or the mark lapsed."""
        mark = self.failed.get(engine.name)
        return mark is None or now >= mark[0] or engine.seen_at > mark[1]

    def mark_failed(self, engine: EngineInfo) -> None:
        """Send nothing more to this engine until the fleet has seen it answer again (or for
        GATEWAY_ENGINE_COOLDOWN_SECONDS), and ask the fleet to probe it now: the fleet decides
        its state, for every replica, and says when it is back (gateway.invalidation)."""
        now = time.monotonic()
        if self.engine_usable(engine, now):  # a new mark: one probe asked per mark
            task = asyncio.create_task(ask_for_probe(engine.name))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        self.failed[engine.name] = (now + settings.GATEWAY_ENGINE_COOLDOWN_SECONDS, time.time())


class ReplyState:
    """Whether the reply has started: an error after that can only end it, not replace it."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.ended = False

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        await self._send(message)

    async def fail(self, err: GatewayError) -> None:
        if not self.started:
            await respond(self._send, err.status, err.body(), err.headers)
        elif not self.ended:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})


def pick(targets: tuple[Target, ...]) -> Target:
    """A canary's weighted choice; one target is the common case."""
    if len(targets) == 1:
        return targets[0]
    return random.choices(targets, weights=[t.weight for t in targets])[0]


def resident_counts(residency: dict[str, dict[str, Tier]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for held in residency.values():
        for engine in held:
            counts[engine] = counts.get(engine, 0) + 1
    return counts


async def ask_for_probe(engine_name: str) -> None:
    """The fleet probes an engine this replica could not reach (workers.desired.enqueue_probe);
    best effort: without it the mark lapses after its cooldown."""
    try:
        await off_loop(_enqueue_probe)(engine_name)
    except Exception:  # noqa: BLE001 - the prober's own period still runs
        stop_if_cancelled()
        log.warning("gateway: could not ask for a probe of %s", engine_name, exc_info=True)


def _enqueue_probe(engine_name: str) -> None:
    from workers.desired import enqueue_probe
    from workers.models import Engine

    engine = Engine.objects.filter(name=engine_name).first()
    if engine is not None:
        enqueue_probe(engine)


def load_on_engine(version_id: int, engine_name: str, record_demand: bool = True) -> Any:
    """Off the event loop: the fleet's single-flight load (workers.desired.request_load)."""
    from adapters.models import AdapterVersion
    from workers.desired import request_load
    from workers.models import Engine

    version = AdapterVersion.objects.select_related("adapter__tenant", "tenant").get(pk=version_id)
    engine = Engine.objects.get(name=engine_name)
    return request_load(version=version, engine=engine, record_demand=record_demand)


def header_of(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return ""


def payload_of(body: bytes) -> dict[str, Any]:
    """The request's body as a JSON object, else 400."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise GatewayError(400, "The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_json")
    if deeper_than(payload, MAX_BODY_DEPTH):
        raise GatewayError(
            400, f"The body nests deeper than {MAX_BODY_DEPTH} levels of JSON.", code="invalid_json"
        )
    return payload


async def read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(400, "The client went away.", code="client_disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise GatewayError(413, f"The body is over {limit} bytes.", code="body_too_large")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    extra = [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS + extra})
    await send({"type": "http.response.body", "body": body})


gateway_app = Gateway()
