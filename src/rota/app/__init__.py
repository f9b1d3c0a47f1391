"""The composition root: settings, adapter selection, start-up waits, and the one place
the server, `rota dev` and `rota worker` are wired. The only package that imports adapters."""
