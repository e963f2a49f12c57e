#!/bin/sh
# One image, several processes: the first argument names the process (README's Procfile and
# production notes). Every setting comes from the environment.
set -eu
role="${1:-web}"
[ "$#" -gt 0 ] && shift
case "$role" in
  web|gateway)
    # The gateway is the same ASGI app (portal/asgi.py routes /v1/ to it); its own Deployment
    # lets it scale apart from the pages.
    exec uvicorn portal.asgi:application --host 0.0.0.0 --port "${PORT:-8000}" \
      --lifespan on --ws-per-message-deflate false "$@" ;;
  worker)
    exec celery -A portal worker --loglevel INFO -Q "${CELERY_QUEUES:-portal}" \
      --concurrency "${CELERY_CONCURRENCY:-2}" -n "portal@%h" "$@" ;;
  engine-worker)
    # Beside an engine: consumes that node's queue (ENGINE_QUEUE_PREFIX + ENGINE_NAME), with the
    # node's own Secret (deploy/k8s/secrets/engine-node.example.env).
    : "${ENGINE_NAME:?ENGINE_NAME is required for an engine worker}"
    : "${ENGINE_KEY:?ENGINE_KEY (this engine's own key) is required for an engine worker}"
    # Its tasks extend the audit chain; without the key the chain key would be derived from the
    # throwaway SECRET_KEY below, and the chain would break.
    : "${AUDIT_CHAIN_KEY:?AUDIT_CHAIN_KEY is required for an engine worker}"
    # The one engine key it holds, in the form the settings read: it can call no other engine.
    PORTAL_ENGINE_KEYS=$(python -c 'import json, os; print(json.dumps({os.environ["ENGINE_NAME"]: os.environ["ENGINE_KEY"]}))')
    # It signs nothing (no session, token, cookie or record): the settings require a key, so it
    # gets one made here, known to no other process, rather than the portal's.
    SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(48))')
    export PORTAL_ENGINE_KEYS SECRET_KEY
    unset ENGINE_KEY
    exec celery -A portal worker --loglevel INFO -Q "${ENGINE_QUEUE_PREFIX:-engine.}${ENGINE_NAME}" \
      --concurrency "${CELERY_CONCURRENCY:-2}" -n "engine-${ENGINE_NAME}@%h" "$@" ;;
  beat)
    exec celery -A portal beat --loglevel INFO "$@" ;;
  live)
    exec python manage.py publish_live_metrics "$@" ;;
  migrate)
    exec python manage.py migrate --noinput "$@" ;;
  manage)
    exec python manage.py "$@" ;;
  *)
    echo "unknown process '$role': use web, gateway, worker, engine-worker, beat, live, migrate or manage" >&2
    exit 64 ;;
esac
