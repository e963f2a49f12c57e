"""Peak memory of the portal process while a large adapter is uploaded through the API.

    .venv/bin/python -m bench.upload_memory [--size-mib 1024] [--storage local|s3] [--write-docs]

Starts the portal (`uvicorn portal.asgi:application`) in a child process on a fresh SQLite
database and local-disk storage (or a moto S3 server on loopback with `--storage s3`), creates a
tenant, an adapter and a token, then streams a generated adapter of about `--size-mib` with httpx
(`POST .../versions/`, multipart, the file produced while it is sent, never held). Reports the
portal's peak RSS (VmHWM from /proc/<pid>/status), its RSS when idle before the upload, and the
throughput, and checks that the stored sha256 equals the one computed while generating.
Goal: peak RSS under 200 MB for 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.docs_section import markers, write_section
from bench.upload_support import (
    BIG_BASE_MODEL,
    BIG_HF_CONFIG,
    REPO,
    GeneratedAdapter,
    PortalServer,
    adapter_upload_body,
    free_port,
    post_streamed,
)

BEGIN, END = markers("upload-memory")
GOAL_BYTES = 200 * 1000 * 1000
MB = 1_000_000

SETUP = """
import django, json, sys
django.setup()
from django.contrib.auth import get_user_model
from adapters.models import Adapter
from adapters.services.registry import base_model_register
from tenants.models import Membership, Tenant
from tenants.services.tokens import token_issue
from adapters.access import AccessContext, SystemAccess
hf = json.loads(sys.argv[1])
user = get_user_model().objects.create_user("bench", password="bench-password-not-secret")
tenant = Tenant.objects.create(slug="bench", name="Bench", quota_storage_bytes=1 << 40)
Membership.objects.create(user=user, tenant=tenant, role="maintainer")
base = base_model_register(access=SystemAccess(), name=sys.argv[2], source="bench", hf_config=hf)
Adapter.objects.create(tenant=tenant, name="big", base_model=base, created_by=user)
print(token_issue(access=AccessContext.for_user(user), scopes=["write"], tenant=tenant).plaintext)
"""


def _run(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _start_moto(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(work / "moto.log", "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/moto-api/data.json", timeout=2)
            break
        except httpx.TransportError:
            time.sleep(0.2)
    import boto3

    boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="bench")
    return proc, url


def measure(size_mib: int, storage: str, memory_limit: int | None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="upload-bench-"))
    moto = None
    try:
        env = {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "SECRET_KEY": "bench-secret-key-not-for-production-0123456789",
            "DATABASE_URL": f"sqlite:///{work / 'portal.sqlite3'}",
            "PORTAL_VAR_DIR": str(work / "var"),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SECURE_SSL_REDIRECT": "0",
            # Validation is enqueued after commit; a queue of its own that no worker consumes.
            "REDIS_URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14"),
            "ADAPTER_MAX_MODEL_BYTES": str(8 << 30),
        }
        if storage == "s3":
            moto, endpoint = _start_moto(work)
            env.update(
                {
                    "ADAPTER_STORAGE_BACKEND": "s3",
                    "S3_BUCKET": "bench",
                    "S3_ENDPOINT_URL": endpoint,
                    "S3_ACCESS_KEY_ID": "testing",
                    "S3_SECRET_ACCESS_KEY": "testing",
                }
            )
        else:
            env.update(
                {"ADAPTER_STORAGE_BACKEND": "local", "ADAPTER_STORAGE_ROOT": str(work / "storage")}
            )
        full_env = {**os.environ, **env}
        _run([sys.executable, "manage.py", "migrate", "--noinput"], full_env)
        token = (
            _run([sys.executable, "-c", SETUP, json.dumps(BIG_HF_CONFIG), BIG_BASE_MODEL], full_env)
            .strip()
            .splitlines()[-1]
        )

        adapter = GeneratedAdapter(size_mib * 1024 * 1024)
        body = adapter_upload_body(adapter)
        with PortalServer(env, memory_limit=memory_limit, log_path=work / "portal.log") as server:
            idle = server.status()
            started = time.perf_counter()
            response = post_streamed(
                f"{server.url}/api/v1/tenants/bench/adapters/big/versions/", body, token
            )
            seconds = time.perf_counter() - started
            after = server.status()
            log = server.log_tail()
        if response.status_code != 201:
            raise SystemExit(f"upload failed: {response.status_code} {response.text}\n{log}")
        stored = {f["name"]: f for f in response.json()["manifest"]}["adapter_model.safetensors"]
        if stored["sha256"] != adapter.sha256 or stored["size"] != adapter.model_size:
            raise SystemExit(f"stored {stored} differs from the generated {adapter.sha256}")
        return {
            "storage": storage,
            "size_bytes": body.length,
            "seconds": seconds,
            "mb_s": body.length / MB / seconds,
            "idle_rss": idle["VmRSS"],
            "peak_rss": after["VmHWM"],
            "memory_limit": memory_limit,
            "sha256_ok": True,
        }
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait()
        shutil.rmtree(work, ignore_errors=True)


def render(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        BEGIN,
        "## Upload through the API: portal peak memory",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}. "
        "The portal runs as `uvicorn portal.asgi:application` in a child process with "
        "RLIMIT_DATA set; the client streams a generated adapter (multipart, produced while sent) "
        "with httpx on the same machine. Peak RSS is the portal's VmHWM.",
        "",
        "| storage | upload | time | throughput | idle RSS | peak RSS | goal | sha256 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ok = "met" if r["peak_rss"] < GOAL_BYTES else "MISSED"
        lines.append(
            f"| {'S3 (moto server on loopback)' if r['storage'] == 's3' else 'local disk'} | "
            f"{r['size_bytes'] / MB:.0f} MB | {r['seconds']:.1f} s | {r['mb_s']:.0f} MB/s | "
            f"{r['idle_rss'] / MB:.0f} MB | {r['peak_rss'] / MB:.0f} MB | < 200 MB: {ok} | "
            f"{'equal' if r['sha256_ok'] else 'DIFFERENT'} |"
        )
    lines += [
        "",
        "Where the bytes go (why the peak stays flat): Django's ASGI handler spools the request body "
        "to a SpooledTemporaryFile (first FILE_UPLOAD_MAX_MEMORY_SIZE = 2 MiB in memory, then an "
        "unlinked temp file); DRF's MultiPartParser hands each file part to Django's "
        "TemporaryFileUploadHandler (MemoryFileUploadHandler only takes bodies under 2 MiB), which "
        "writes it to FILE_UPLOAD_TEMP_DIR in 64 KiB chunks; `version_upload` then streams that file "
        "to storage in 1 MiB reads while hashing. The body is never held whole: the idle RSS is the "
        "imported app; on local disk the upload adds a few MB, on S3 about 50 MB (one 8 MiB part "
        "buffered, its copy for the request, Content-MD5 and botocore's request handling). The cost "
        "is disk traffic (the body is written twice before it reaches storage), not memory. Uploads "
        "that cannot fit are refused from Content-Length before the body is parsed into temp files "
        "(Django's ASGI handler has received it by then); large adapters "
        "should use the direct-to-S3 multipart upload (`.../uploads/`), which never passes the "
        "portal's disk or memory.",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--storage", default="local", help="local, s3, or both (comma-separated)")
    parser.add_argument(
        "--memory-limit-mib",
        type=int,
        default=512,
        help="RLIMIT_DATA of the portal process (0: none)",
    )
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    limit = args.memory_limit_mib * 1024 * 1024 if args.memory_limit_mib else None
    results = []
    for storage in args.storage.split(","):
        result = measure(args.size_mib, storage.strip(), limit)
        results.append(result)
        print(json.dumps(result))
    section = render(results, ".venv/bin/python -m bench.upload_memory " + " ".join(sys.argv[1:]))
    print(section)
    if args.write_docs:
        write_section("upload-memory", section)


if __name__ == "__main__":
    main()
