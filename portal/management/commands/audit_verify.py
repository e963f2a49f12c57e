"""`python manage.py audit_verify`: check the audit hash chain; exit 1 naming the first broken event.

With `--evidence FILE`: check a version's compliance record (offline checks, then against the
live chain and usage); with `--export FILE`: check an audit export's lines against the chain.
Exit 1 listing what no longer matches."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from portal.audit_verify import verify_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain, or a compliance record with --evidence FILE."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument(
            "--evidence", metavar="FILE", help="a version's compliance record (evidence JSON)"
        )
        parser.add_argument(
            "--export",
            metavar="FILE",
            help="an audit export (.jsonl or .csv) to check line by line",
        )

    def handle(self, *args, **options):
        if options["evidence"]:
            return self._evidence(Path(options["evidence"]), as_json=options["json"])
        if options["export"]:
            return self._export(Path(options["export"]), as_json=options["json"])
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

    def _evidence(self, path: Path, *, as_json: bool) -> None:
        from portal.evidence_check import check_record

        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise CommandError(
                f"{path}: not a readable JSON record ({exc})", returncode=2
            ) from None
        problems = check_record(record) if isinstance(record, dict) else ["not a JSON object"]
        if as_json:
            self.stdout.write(json.dumps({"ok": not problems, "problems": problems}))
        elif not problems:
            self.stdout.write(
                self.style.SUCCESS(f"{path}: the record verifies and matches the chain")
            )
        if problems:
            listing = "".join(f"\n  - {p}" for p in problems)
            raise CommandError(f"{path}: the record does not verify:{listing}", returncode=1)

    def _export(self, path: Path, *, as_json: bool) -> None:
        from portal.evidence_check import check_export

        try:
            checked, problems = check_export(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: not readable ({exc})", returncode=2) from None
        if as_json:
            self.stdout.write(
                json.dumps({"ok": not problems, "checked": checked, "problems": problems})
            )
        elif not problems:
            self.stdout.write(self.style.SUCCESS(f"{path}: {checked} events match the chain"))
        if problems:
            listing = "".join(f"\n  - {p}" for p in problems[:50])
            raise CommandError(
                f"{path}: the export does not match the chain:{listing}", returncode=1
            )
