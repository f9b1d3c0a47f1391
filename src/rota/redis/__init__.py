"""Shared Redis adapter plumbing: the client factory and the key layout (DESIGN.md §6)."""
