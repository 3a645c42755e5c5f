"""Rules: one module per finding id (see registry.RULES)."""
