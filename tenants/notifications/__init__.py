"""A tenant's notifications: one per key, ever; shown on its pages, e-mailed to its recipients and
posted, signed, to its webhooks. `services.notify` is the one entry point, for any app above."""
