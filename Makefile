# LoRA Portal: `make run` (portal + demo on embedded defaults) and `make test` (every test).
SHELL := /bin/bash
PY := .venv/bin/python
ENGINE_PY := .venv-engine/bin/python
TINY := var/tiny
PORT ?= 8000
ENGINE_PORT ?= 8100
TRACES_PORT ?= 6006

.PHONY: bench-classes redis run test test-setup debian-tools test-stress lint bench bench-load reliability-doc bench-cache bench-cache2 bench-sessions-floor bench-validation bench-validation-worst bench-upload bench-list bench-fleet-scale bench-fleet-real bench-gateway bench-gateway-overhead bench-gateway-routing bench-neighbours bench-playground bench-eval bench-budgets bench-live bench-redis-footprint bench-script-link bench-db-connections bench-audit-export litellm-venv deps venv engine-venv tiny-model services browser promtool k8s-tools image demo migrate clean-var trace-store bench-gateway-tracing bench-release bench-release-cost bench-gateway-features

deps: venv engine-venv tiny-model

venv:
	@scripts/ensure_venv.sh

engine-venv:
	@engine/setup_venv.sh

tiny-model: engine-venv
	@$(ENGINE_PY) -m engine.tiny_model --out $(TINY)

services:
	@scripts/ensure_services.sh postgres redis

# The trace store `make run` starts (Arize Phoenix from PyPI, its own venv): docs/observability.md.
trace-store:
	@scripts/ensure_trace_store.sh

redis:
	@scripts/ensure_services.sh redis

browser:
	@scripts/ensure_browser.sh

# promtool for the alerting-rule tests (docs/alerts/).
promtool:
	@scripts/ensure_promtool.sh

# kubectl (its kustomize) for the manifest tests (tests/deploy, deploy/k8s).
k8s-tools:
	@scripts/ensure_k8s_tools.sh

# The portal's image (deploy/Containerfile) with Debian's podman from a debootstrap root file
# system (3.5-17 min on 2 cores, by load); tests/deploy/test_image.py then runs `check --deploy` and
# the migrations in it.
image:
	@scripts/build_image.sh

# The portal with a demo: SQLite and local-disk storage (embedded defaults), Redis, one CPU engine.
# The demo identity provider (tests/oidc_provider, started by the Procfile's `idp` line): the
# sign-in page offers it beside the password form (docs/sso.md).
IDP_PORT ?= 8300
run: export OIDC_PROVIDERS ?= [{"name": "demo-idp", "label": "Demo IdP", "issuer": "http://127.0.0.1:$(IDP_PORT)/o", "client_id": "lora-portal", "client_secret_env": "DEMO_IDP_CLIENT_SECRET", "cli_client_id": "lora-portal-cli"}]
run: export DEMO_IDP_CLIENT_SECRET ?= demo-idp-client-secret
# Every process traces to the demo's trace store (the Procfile's `traces` line), the engine too
# (engine.launcher reads the same variable); the version page links a version's trace there.
run: export OTEL_EXPORTER_OTLP_ENDPOINT ?= http://127.0.0.1:$(TRACES_PORT)
run: export TRACE_URL_TEMPLATE ?= http://127.0.0.1:$(TRACES_PORT)/projects/UHJvamVjdDox/traces/{trace_id}

run: deps redis trace-store
	@DJANGO_DEBUG=1 $(PY) manage.py migrate --noinput
	@DJANGO_DEBUG=1 ENGINE_URL=http://127.0.0.1:$(ENGINE_PORT) $(PY) manage.py seed_demo --tiny-dir $(TINY)
	@echo "LoRA Portal: http://127.0.0.1:$(PORT)/  (log in as alice, bob, rita, olga, aude or admin; password above)"
	@echo "Traces: http://127.0.0.1:$(TRACES_PORT)/  (Phoenix: every request, task and version's lifecycle)"
	@echo "The engine answers 25-100 s after start; /healthz turns green then."
	@DJANGO_DEBUG=1 PORT=$(PORT) WEB_PORT=$(PORT) ENGINE_PORT=$(ENGINE_PORT) IDP_PORT=$(IDP_PORT) TRACES_PORT=$(TRACES_PORT) .venv/bin/honcho -f Procfile start

# Debian's tools the tests use (Chromium, promtool, kubectl), in one apt transaction.
debian-tools:
	@scripts/ensure_debian_tools.sh

# What the tests need, set up side by side: the two virtualenvs and Debian's packages download
# and install at once (a fresh clone's setup took 6.5 min one after another).
test-setup: deps services debian-tools

test:
	@$(MAKE) --no-print-directory -j4 --output-sync=line test-setup
	@CI=$${CI:-} scripts/run_tests.sh

# The real-process tests (engines, faults, browsers, sockets) ROUNDS times under CPU load; lists
# every test that failed once. CHANGED=main: only the test files changed since main; TESTS=...:
# those files or ids.
ROUNDS ?= 3
test-stress: deps services browser
	@$(PY) -m tests.stress --rounds $(ROUNDS) $(if $(CHANGED),--changed $(CHANGED)) $(TESTS)

lint: venv
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .
	@.venv/bin/mypy

# Every benchmark; each rewrites only its own section of docs/benchmarks.md.
bench: bench-validation bench-validation-worst bench-upload bench-list bench-audit-export bench-cache bench-cache2 bench-sessions-floor bench-fleet-scale bench-fleet-real bench-gateway bench-playground bench-eval bench-release bench-budgets bench-live

bench-validation: venv
	@$(PY) -m bench.validation_throughput --sizes-mib 1024,256 --repeat 5 --write-docs

bench-validation-worst: venv
	@$(PY) -m bench.validation_worst --repeat 3 --write-docs

bench-upload: venv services
	@$(PY) -m bench.upload_memory --size-mib 1024 --storage local,s3 --memory-limit-mib 512 --write-docs

bench-list: venv services
	@$(PY) -m bench.list_versions --write-docs

# Streaming a 200,000-event audit export through the ASGI portal: peak RSS vs rows (~2 min).
bench-audit-export: venv services
	@$(PY) -m bench.audit_export --rows 200000 --write-docs

# Fleet controller planning cost, 100 engines x 10,000 versions, in process (~20 s).
bench-fleet-scale: venv
	@$(PY) -m bench.fleet_scale --engines 100 --versions 10000 --seed 1 --repeat 3 --write-docs

# The fleet on two real CPU engines with a real worker and beat: release -> resident and engine
# restart -> desired set restored (~6-8 min on 2 cores; ~6 GB of RAM while the engines run).
bench-fleet-real: venv services engine-venv tiny-model
	@$(PY) -m bench.fleet_real --releases 10 --restarts 3 --reconcile-seconds 10 --write-docs

# Cache simulator suite (bench/cachesim): writes its section of docs/benchmarks.md and
# docs/img/cachesim-*.png; a few minutes on 2 cores.
bench-cache: venv
	@$(PY) -m bench.cachesim.report

# The cache policy's second goal set: every goal over three seeds; GOALS=2,4 re-runs some.
bench-cache2: venv
	@$(PY) -m bench.cachesim.round2_report $(if $(GOALS),--only $(GOALS))

bench-sessions-floor: venv
	@$(PY) -m bench.cachesim.sessions_floor --write-docs

# LiteLLM's proxy (pinned) in .venv-litellm, only for the gateway overhead comparison.
litellm-venv:
	@bench/setup_litellm.sh

# The gateway on real CPU engines: what it adds per request against the engine and LiteLLM's
# proxy (one engine, ~8 min; 1000 requests a kind: a p50 of 300 moved by 1-2 ms between runs), and its engine choice against round-robin (two engines, ~15 min).
bench-gateway: bench-gateway-overhead bench-gateway-features bench-gateway-tracing bench-gateway-routing

bench-gateway-overhead: venv services engine-venv tiny-model litellm-venv
	@$(PY) -m bench.gateway_overhead --requests 1000 --load-requests 1000 --stub-requests 5000 --concurrency 16 --engine-cpus 0 --profile --write-docs

# Tracing off, at 1 % and at 100 %: three gateways side by side on one engine and a stub, and the
# share of traced requests whose engine span joins the gateway's (docs/observability.md; ~6 min).
bench-gateway-tracing: venv services engine-venv tiny-model
	@$(PY) -m bench.gateway_overhead --tracing --requests 300 --warmup 30 --load-requests 500 --stub-requests 20000 --concurrency 16 --engine-cpus 0 --write-docs

# Every gateway feature on (budgets on every scope, service classes, the live headroom, lanes):
# classes on against off in one run, the CPU per request, and where it goes (issue 46).
bench-gateway-features: venv services engine-venv tiny-model
	@$(PY) -m bench.gateway_overhead --features --requests 1000 --warmup 30 --load-requests 500 --stub-requests 5000 --concurrency 16 --engine-cpus 0 --profile --write-docs

bench-gateway-routing: venv services engine-venv tiny-model
	@$(PY) -m bench.gateway_routing --requests 300 --rates 1.5,4 --adapters 16 --zipf 1.1 --seed 1 --write-docs

# Noisy neighbours: tenant B's steady streams while tenant A floods, holds unread streams, runs
# past the time budget and sends its largest requests (two engines, ~8 min), then the
# alone and overtime phases again with both tenants straight at the engines (the reference).
# Service classes on saturated engines: the simulator with the gateway's policy code (seconds),
# then the replay through two real engines and two gateway replicas
# (bench/classes_real.py; ~9 min on 2 cores, ~7 GB of RAM while the engines run).
bench-classes: venv services engine-venv tiny-model
	@$(PY) -m bench.classes --seconds 600 --write-docs
	@$(PY) -m bench.classes_real --write-docs

bench-neighbours: venv services engine-venv tiny-model
	@$(PY) -m bench.neighbours --phase-seconds 40 --b-rate 4 --write-docs

# The playground: prompt on its websocket -> first token frame, against the engine's own TTFT
# and the gateway's API, same prompt (one engine, a few minutes), on the portal's default settings:
# a member's prompt is checked against the gateway's tables, with no database round trip.
bench-playground: venv services engine-venv tiny-model
	@$(PY) -m bench.playground_latency --rounds 200 --warmup 20 --max-tokens 4 --write-docs

# An eval run of a 200-case suite on two versions against the engine alone at the same
# concurrency (issue 33: at least 0.8x).
bench-eval: venv services engine-venv tiny-model
	@$(PY) -m bench.eval_throughput --cases 200 --concurrency 4 --max-tokens 8 --write-docs

# Release plans: the guards' statistics on 1000 simulated plans per case (bench.release_stats),
# then two candidates through one plan on the tiny model with real engine answers and the
# portal's own controller: one built to fail the live checks, and 20 plans of one equal to the
# stable (false rollbacks beside the stated rate) (bench.release); docs/benchmarks.md.
bench-release: venv services engine-venv tiny-model
	@$(PY) -m bench.release_stats --plans 1000 --write-docs
	@$(PY) -m bench.release --plans 20 --bad-plans 3 --write-docs
	@$(MAKE) --no-print-directory bench-release-cost

# What a running release plan's sampling and scoring add to the caller's reply: one gateway, an
# alias with no plan and two with a plan sampling 10 % and 100 %, interleaved, through the stub
# and a real CPU engine, a real worker scoring the samples (bench.release_cost); needs a quiet
# machine (about 8 minutes).
bench-release-cost: venv services engine-venv tiny-model
	@$(PY) -m bench.release_cost --requests 1000 --stub-latency-requests 3000 --warmup 50 --stub-requests 10000 --concurrency 16 --engine-cpus 0 --stream-tokens 2 --write-docs

# Budgets: 64 concurrent streams over two gateway replicas against a budget that holds a tenth of
# their worst cases: never a token over, no refusal that would have fit.
bench-budgets: venv services engine-venv tiny-model
	@$(PY) -m bench.budget_overshoot --requests 64 --share 0.1 --write-docs

# Load on two CPU engines through the portal: 200 streaming clients for 60 s (errors by code,
# TTFT, the pages' p99 meanwhile), 50 requests for one cold adapter (one load), then a 20-minute
# soak with the demo load's mix (RSS, fds, sockets of every process). ~27 min, ~7 GB of RAM.
bench-load: venv services engine-venv tiny-model
	@$(PY) -m bench.load --burst-clients 200 --burst-seconds 60 --cold-clients 50 --soak-minutes 20 --soak-rate 2 --write-docs

# The fault suite (tests/faults: each fault breaks a real part), then docs/reliability.md's table
# from what it measured (var/faults/*.json).
reliability-doc: deps services
	@$(PY) -m pytest -q tests/faults -p no:cacheprovider
	@$(PY) -m tests.faults.reliability_doc

# Live metrics fan-out: 500 websocket subscribers across 50 tenants on one uvicorn with the Redis
# channel layer and the real publisher; p99 publish -> receipt and CPU per subscriber, with the
# access generation and with a database re-check on every message (~4 min).
bench-live: venv services
	@$(PY) -m bench.live_fanout --subscribers 500 --tenants 50 --seconds 60 --warmup 10 --write-docs

# Redis memory per adapter and tenant with the gateway's own recorder (docs/deploy.md's sizing);
# REDIS_URL must name an empty database (default: 10), emptied afterwards. About 30 s.
bench-redis-footprint: venv redis
	@REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/10} $(PY) -m bench.redis_footprint --shapes 10x10,100x10,100x100 --write-docs

# The admission script's round trip, redis-py against the gateway's lean path, after idle gaps.
bench-script-link: venv redis
	@REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/10} $(PY) -m bench.script_link --rounds 300 --gaps-ms 0,5,20,50 --cpu 1 --write-docs

# PostgreSQL connections per uvicorn process and per prefork Celery worker, measured under load
# (docs/deploy.md's sizing). DATABASE_URL must name a migrated PostgreSQL database. About 1 min.
bench-db-connections: venv services
	@$(PY) -m bench.db_connections --pool-max 10 --concurrency 64 --requests 2000 --worker-concurrency 2 --tasks 200 --write-docs
