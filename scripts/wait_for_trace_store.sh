#!/usr/bin/env bash
# `make run`'s processes start together; those that export traces wait (at most 90 s) for the
# trace store's OTLP port, so the first spans of the demo are kept rather than dropped with an
# export error. No endpoint set: nothing to wait for. Usage: wait_for_trace_store.sh CMD...
endpoint="${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
if [[ -n "$endpoint" ]]; then
    hostport="${endpoint#*://}"
    hostport="${hostport%%/*}"
    host="${hostport%:*}"
    port="${hostport##*:}"
    for _ in $(seq 1 450); do
        (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null && break
        sleep 0.2
    done
fi
exec "$@"
