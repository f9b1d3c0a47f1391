"""Dramatiq's throughput on the same RabbitMQ, for `rota bench throughput` to be compared with.

Two figures from one run, each over N no-op messages on a queue of their own:

- **drain** (Dramatiq's usual benchmark shape): N messages are sent with the workers stopped,
  then `dramatiq` starts with --processes worker processes; timed from the first consumer's
  arrival on the queue to the queue's last ready message taken. The sending is not timed.
- **end to end**: the same workers, now running and idle, get N more messages; timed from the
  first `send()` to the queue's last ready message taken after the last send: sending and
  running together, as `rota bench throughput`'s create + run figure counts its creation.

"The last ready message taken": RabbitMQ's queue.declare answers the ready messages only, so
the last few in flight (at most the prefetch of every worker thread, 2 per thread, 32 with the
defaults) finish within milliseconds after. Dramatiq records nothing per message: there is no
store to commit to, only the broker's ack.

CPU per job, by process, for both figures (`cpuMicrosPerJob`, `endToEndCpuMicrosPerJob`): the
`sender` (this process), the `workers` (dramatiq's processes) and `rabbitmq` (beam.smp, when it
runs on this machine; it counts every other user of the broker too), read from /proc.

Run it through run.sh (a virtualenv of its own; Dramatiq is never a dependency of Rota):

    bench/peers/dramatiq/run.sh --jobs 20000 --processes 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker

QUEUE = "rota-peer-bench"
URL = os.environ.get("ROTA_PEER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
DEADLINE_SECONDS = 600

broker = RabbitmqBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop() -> None:
    """The no-op job."""


Channel = pika.adapters.blocking_connection.BlockingChannel


def _queue_state(channel: Channel) -> tuple[int, int]:
    """(ready messages, consumers) of the bench's queue."""
    frame = channel.queue_declare(queue=QUEUE, passive=True)
    return frame.method.message_count, frame.method.consumer_count


def _wait(condition: Callable[[], bool], poll: float) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the peer bench did not finish within {DEADLINE_SECONDS} s")
        time.sleep(poll)


# --- CPU by process, from /proc (Linux) ----------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None: it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command's name
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _tree(pid: int) -> list[int]:
    """A process and its descendants (dramatiq's worker processes under its master)."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                continue
    return out


def _named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
        except OSError:
            continue
    return pids


Reading = dict[tuple[str, int], float]


def _cpu(roles: dict[str, Iterable[int]]) -> Reading:
    """CPU seconds so far, by (role, process)."""
    out: Reading = {}
    for role, pids in roles.items():
        for pid in pids:
            seconds = _cpu_of(pid)
            if seconds is not None:
                out[role, pid] = seconds
    return out


def _per_job(before: Reading, after: Reading, jobs: int) -> dict[str, float]:
    """Microseconds of CPU per job by role between two readings: the processes alive at the
    second, each from its first reading (or from its start), as `rota bench` counts them."""
    used: dict[str, float] = {}
    for (role, pid), seconds in after.items():
        used[role] = used.get(role, 0.0) + seconds - before.get((role, pid), 0.0)
    return {role: round(used[role] * 1e6 / jobs, 1) for role in sorted(used)}


def _send(jobs: int) -> None:
    for _ in range(jobs):
        noop.send()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8, help="per process (Dramatiq's default)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    broker.declare_queue(QUEUE)
    broker.flush(QUEUE)
    t0 = time.perf_counter()
    _send(args.jobs)
    enqueue = time.perf_counter() - t0

    watch = pika.BlockingConnection(pika.URLParameters(URL))
    channel = watch.channel()
    ready, _ = _queue_state(channel)
    here = Path(__file__).resolve().parent
    dramatiq_cmd = [str(Path(sys.executable).with_name("dramatiq")), "bench", "--path", str(here)]
    dramatiq_cmd += ["--processes", str(args.processes), "--threads", str(args.threads)]
    workers = subprocess.Popen(dramatiq_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _queue_state(channel)[1] > 0, 0.001)
        roles = {"sender": [os.getpid()], "workers": _tree(workers.pid)}
        roles["rabbitmq"] = _named("beam.smp")
        cpu_before = _cpu(roles)
        start = time.perf_counter()
        _wait(lambda: _queue_state(channel)[0] == 0, 0.005)
        drained = time.perf_counter() - start
        drain_cpu = _per_job(cpu_before, _cpu(roles), args.jobs)
        # Every worker process is consuming (the drain's first consumer was one of them).
        _wait(lambda: _queue_state(channel)[1] >= args.processes, 0.01)
        roles["workers"] = _tree(workers.pid)
        cpu_before = _cpu(roles)
        t0 = time.perf_counter()
        _send(args.jobs)
        sent = time.perf_counter()
        _wait(lambda: _queue_state(channel)[0] == 0, 0.005)
        end_to_end = time.perf_counter() - t0
        end_to_end_cpu = _per_job(cpu_before, _cpu(roles), args.jobs)
    finally:
        workers.terminate()
        workers.wait(30)
        watch.close()
        broker.close()
    result = {
        "scenario": "throughput",
        "peer": f"dramatiq {dramatiq.__version__}",
        "jobs": args.jobs,
        "readyAtStart": ready,
        "processes": args.processes,
        "threadsPerProcess": args.threads,
        "enqueueSeconds": round(enqueue, 3),
        "runSeconds": round(drained, 3),
        "jobsPerSecond": round(args.jobs / drained, 1),
        "cpuMicrosPerJob": drain_cpu,
        "endToEndSendSeconds": round(sent - t0, 3),
        "endToEndSeconds": round(end_to_end, 3),
        "endToEndJobsPerSecond": round(args.jobs / end_to_end, 1),
        "endToEndCpuMicrosPerJob": end_to_end_cpu,
        "environment": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
