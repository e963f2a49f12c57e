"""Server-rendered gateway pages: the tenant's playground, usage (chargeback) and cost."""
