"""`python manage.py audit_verify`: check the audit hash chain; exit 1 naming the first broken event."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from portal.audit_verify import verify_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain and name the first broken event."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args, **options):
        report = verify_chain()
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict()))
        elif report.ok:
            self.stdout.write(
                self.style.SUCCESS(f"audit chain intact: {report.checked} events verified")
            )
        if not report.ok:
            raise CommandError(
                f"audit chain broken at event #{report.first_broken_id}: {report.reason} "
                f"({report.checked} events verified before it)",
                returncode=1,
            )
