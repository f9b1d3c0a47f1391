"""``python -m rota``."""

from rota.cli import main

main()
