#!/bin/sh
# Dramatiq's throughput on this machine's RabbitMQ, from a virtualenv of its own
# (bench/peers/dramatiq/.venv; never a dependency of Rota). Arguments go to bench.py.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
if [ ! -x "$venv/bin/dramatiq" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
fi
exec "$venv/bin/python" "$here/bench.py" "$@"
