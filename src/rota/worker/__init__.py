"""The worker runtime: the executor that runs handlers (:mod:`rota.worker.executor`), its
reporter and offline outbox, presence and attempt claims. Job authors import :mod:`rota`
(the SDK lives in :mod:`rota.sdk`); the worker process is built in :mod:`rota.app`."""
