"""Sonde's wire protocol: pure models, codec, signing and the serve line protocol.

Nothing in this package does I/O or imports an async framework.
"""
