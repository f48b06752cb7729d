"""Shipped serving profiles (one TOML file each). Schema: r9k.registry.schema.Profile."""
