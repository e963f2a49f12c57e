"""`python manage.py seed_demo --tiny-dir var/tiny`: the demo world of `make run` (idempotent)."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.demo import DEMO_USERS, seed_demo


class Command(BaseCommand):
    help = (
        "Seed the demo: tenants, a user per role, the tiny base model, an engine, a few adapters."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tiny-dir", type=Path, default=Path("var/tiny"))
        parser.add_argument("--engine-url", default=settings.DEMO_ENGINE_URL)
        parser.add_argument("--engine-name", default="local-1")

    def handle(self, *args, **options):
        if not settings.DEBUG:
            # The demo's users have known passwords and its engine key is printed: never on a
            # real deployment.
            raise CommandError(
                "seed_demo creates users with published passwords; it runs only with "
                "DJANGO_DEBUG=1 (as `make run` sets)."
            )
        tiny_dir = options["tiny_dir"]
        if not (tiny_dir / "base" / "config.json").exists():
            raise CommandError(
                f"{tiny_dir}/base/config.json is missing; build it with "
                f"`.venv-engine/bin/python -m engine.tiny_model --out {tiny_dir}`"
            )
        result = seed_demo(
            tiny_dir=tiny_dir,
            engine_url=options["engine_url"],
            engine_name=options["engine_name"],
            adapter_root=Path(settings.ENGINE_ADAPTER_ROOT) / options["engine_name"],
            token_file=Path(settings.VAR_DIR) / "demo-inference-token",
        )
        self.stdout.write(self.style.SUCCESS("demo ready"))
        for username, (roles, memberships) in DEMO_USERS.items():
            where = ", ".join([*roles, *(f"{role} of {t}" for t, role in memberships.items())])
            self.stdout.write(f"  {username:8} / {result.password}   ({where})")
        if result.sso:
            self.stdout.write(
                "  single sign-on: 'Sign in with Demo IdP' on the sign-in page; at the demo "
                f"provider dana (acme maintainer, reviewer), erin (globex viewer) or kai (maps "
                f"nowhere: refused), password {result.password} (docs/sso.md)"
            )
        if result.uploaded:
            self.stdout.write(f"  uploaded for validation: {', '.join(result.uploaded)}")
        if result.released:
            self.stdout.write(f"  released (placed on the engine once it is up): {result.released}")
        base = f"http://127.0.0.1:{settings.DEMO_PORT}"
        for line in result.release:
            self.stdout.write(f"  {line}")
        self.stdout.write(
            f"  the release plan, live as the demo load asks the alias: "
            f"{base}/t/acme/aliases/support-bot/release/ ; the gated version waiting for a "
            f"reviewer (rita): {base}/review/"
        )
        self.stdout.write(
            f"  what the fleet costs (admin, aude): {base}/platform/cost/ ; acme's share (alice): "
            f"{base}/t/acme/cost/ ; the released version's compliance record: "
            f"{base}/t/acme/a/support/v/1/evidence/ (numbers fill in as demo_load's requests "
            "are persisted, every minute)"
        )
        if result.inference_token:
            self.stdout.write(
                "  try the gateway once the engine is up (alice's inference token, acme):\n"
                f"    curl -s http://127.0.0.1:{settings.DEMO_PORT}/v1/chat/completions "
                f"-H 'Authorization: Bearer {result.inference_token}' "
                "-H 'Content-Type: application/json' "
                '-d \'{"model": "support", "messages": [{"role": "user", "content": "hi"}]}\''
            )
