"""Rota."""
