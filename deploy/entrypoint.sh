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
    # Beside an engine: consumes that node's queue (ENGINE_QUEUE_PREFIX + ENGINE_NAME).
    : "${ENGINE_NAME:?ENGINE_NAME is required for an engine worker}"
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
