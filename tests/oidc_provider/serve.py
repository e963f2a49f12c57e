"""Start the test provider:
`python -m tests.oidc_provider.serve --dir DIR --port PORT [--demo] [--device-grant]`
(`--demo`: as `make run` starts it, with the demo's clients and people, tests/oidc_provider/demo.py;
`--device-grant`: offer the device authorization grant, tests/oidc_provider/device.py).

Makes its RSA key on the first start, migrates its SQLite database, then serves it with uvicorn.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def _ensure_key(directory: Path) -> None:
    pem = directory / "rsa.pem"
    if pem.exists():
        return
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--demo", action="store_true", help="add `make run`'s demo clients and people"
    )
    parser.add_argument(
        "--device-grant",
        action="store_true",
        help="offer the OAuth device authorization grant (RFC 8628) in the discovery document",
    )
    args = parser.parse_args()
    directory = Path(args.dir)
    directory.mkdir(parents=True, exist_ok=True)
    _ensure_key(directory)
    os.environ["OIDC_PROVIDER_DIR"] = str(directory)
    os.environ["OIDC_PROVIDER_URL"] = f"http://127.0.0.1:{args.port}"
    os.environ["OIDC_PROVIDER_DEVICE_GRANT"] = "1" if args.device_grant else "0"
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    if args.demo:
        from tests.oidc_provider.demo import seed

        seed()
    import uvicorn
    from django.core.asgi import get_asgi_application

    uvicorn.run(get_asgi_application(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
