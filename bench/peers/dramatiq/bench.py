"""Dramatiq's throughput on the same RabbitMQ, for `rota bench throughput` to be compared with.

N no-op messages are sent to a queue of their own (workers stopped), then `dramatiq` starts
with --processes worker processes; the run is timed from the first consumer's arrival on the
queue to the queue's last ready message taken (the last few in flight, at most the prefetch of
every worker thread, finish within milliseconds of that). Dramatiq records nothing per
message: there is no store to commit to, only the broker's ack.

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
from pathlib import Path

import dramatiq
import pika
from dramatiq.brokers.rabbitmq import RabbitmqBroker

QUEUE = "rota-peer-bench"
URL = os.environ.get("ROTA_PEER_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")

broker = RabbitmqBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE, max_retries=0)
def noop() -> None:
    """The no-op job."""


def _queue_state(channel: pika.adapters.blocking_connection.BlockingChannel) -> tuple[int, int]:
    """(ready messages, consumers) of the bench's queue."""
    frame = channel.queue_declare(queue=QUEUE, passive=True)
    return frame.method.message_count, frame.method.consumer_count


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
    for _ in range(args.jobs):
        noop.send()
    enqueue = time.perf_counter() - t0
    broker.close()

    watch = pika.BlockingConnection(pika.URLParameters(URL))
    channel = watch.channel()
    ready, _ = _queue_state(channel)
    here = Path(__file__).resolve().parent
    workers = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("dramatiq")),
            "bench",
            "--path",
            str(here),
            "--processes",
            str(args.processes),
            "--threads",
            str(args.threads),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while _queue_state(channel)[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        start = time.perf_counter()
        while _queue_state(channel)[0] > 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        drained = time.perf_counter() - start
    finally:
        workers.terminate()
        workers.wait(30)
        watch.close()
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
        "environment": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
