"""`python -m lora_portal_client ...` is `lora-portal ...`."""

from lora_portal_client.cli import main

raise SystemExit(main())
