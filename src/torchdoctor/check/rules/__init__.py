"""Rules, one module per checklist stage; each registers with @rule on import."""
