"""The worker side: the SDK handlers are written against, discovery of job types, and the
executor that runs them (:mod:`rota.worker.executor`, imported on demand)."""

from rota.worker.discovery import JobRegistry, load_jobs
from rota.worker.sdk import JobContext, JobData, JobDefinition, PermanentError, job

__all__ = [
    "JobContext",
    "JobData",
    "JobDefinition",
    "JobRegistry",
    "PermanentError",
    "job",
    "load_jobs",
]
