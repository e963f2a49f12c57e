"""`python manage.py demo_load`: a small background load for `make run`'s demo, so the live charts
move on a fresh start. Sends one short chat request every few seconds through the gateway, as
alice's demo inference token (var/demo-inference-token, written by seed_demo), to the demo's
released adapter, to the alias a release plan ramps (support-bot) and now and then to the
base model. Waits quietly while the engine starts."""

from __future__ import annotations

import itertools
import logging
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

PROMPTS = ("hello", "how do I reset my password?", "summarise our refund policy", "thanks!")


class Command(BaseCommand):
    help = "Send a request every few seconds through the gateway with the demo inference token."

    def add_arguments(self, parser):
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--every", type=float, default=3.0, help="seconds between requests")
        parser.add_argument("--models", default="support,support-bot,support-bot,tiny-llama")
        parser.add_argument("--count", type=int, default=0, help="stop after N requests (0: never)")

    def handle(self, *args, **options):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request drowns the rest
        token_file = Path(settings.VAR_DIR) / "demo-inference-token"
        if not token_file.exists():
            raise CommandError(f"{token_file} is missing: run `manage.py seed_demo` first.")
        token = token_file.read_text().strip()
        models = [m for m in options["models"].split(",") if m]
        every = max(0.2, options["every"])
        sent, failures_in_a_row = 0, 0
        with httpx.Client(
            base_url=options["url"], headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            for model, prompt in zip(itertools.cycle(models), itertools.cycle(PROMPTS)):
                started = time.monotonic()
                ok = self._send(client, model, prompt, quiet=failures_in_a_row > 0)
                failures_in_a_row = 0 if ok else failures_in_a_row + 1
                sent += 1
                if options["count"] and sent >= options["count"]:
                    return
                # Back off while the engine starts (it answers 25-100 s after `make run`).
                pause = every if ok else min(30.0, every * 2 ** min(failures_in_a_row, 4))
                time.sleep(max(0.0, pause - (time.monotonic() - started)))

    def _send(self, client: httpx.Client, model: str, prompt: str, *, quiet: bool) -> bool:
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 16,
            "stream": True,
        }
        try:
            with client.stream("POST", "/v1/chat/completions", json=body) as response:
                for _ in response.iter_bytes():
                    pass
                if response.status_code == 200:
                    return True
                problem = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        if not quiet:
            self.stderr.write(f"demo load: {model} answered {problem}; retrying with a back-off")
        return False
