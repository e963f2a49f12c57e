"""Server-rendered fleet pages for operators: engines and their actions, engine forms, the
fleet-wide overview pages."""
