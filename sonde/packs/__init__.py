"""Probe plugins: the framework (base, context, registry, executor) and the built-in packs."""
