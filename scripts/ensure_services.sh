#!/usr/bin/env bash
# Start the named services (postgres, redis; default both) on loopback when they are not already
# answering. Idempotent.
set -euo pipefail
wanted="${*:-postgres redis}"

if [[ " $wanted " == *" postgres "* ]] && ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null 2>&1; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    echo "starting PostgreSQL $version"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start
  else
    echo "PostgreSQL is not running and pg_ctlcluster is missing; install postgresql" >&2
    exit 1
  fi
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi

if [[ " $wanted " == *" redis "* ]] && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  if command -v redis-server >/dev/null 2>&1; then
    echo "starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
  else
    echo "Redis is not running and redis-server is missing; install redis-server" >&2
    exit 1
  fi
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
