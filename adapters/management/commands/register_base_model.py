"""`python manage.py register_base_model NAME DIR`: register a base model from its config.json."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from adapters.access import SystemAccess
from adapters.services.registry import base_model_register_from_dir
from core.errors import ApplicationError


class Command(BaseCommand):
    help = "Register a base model (module dimensions are read from DIR/config.json)."

    def add_arguments(self, parser):
        parser.add_argument("name", help="the name adapters and engines use, e.g. qwen3-32b")
        parser.add_argument("model_dir", type=Path, help="the model directory holding config.json")

    def handle(self, *args, **options):
        try:
            base = base_model_register_from_dir(
                access=SystemAccess(), name=options["name"], model_dir=options["model_dir"]
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}", returncode=1) from None
        dims = ", ".join(
            f"{module} {d_in}->{d_out}"
            for module, (d_in, d_out) in sorted(base.module_dims.items())
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"registered {base.name} ({base.architecture}, {base.num_layers} layers): {dims}"
            )
        )
