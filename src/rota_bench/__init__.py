"""Rota's benchmarks (``rota bench``): a package of their own beside the product, in the same
distribution, usable with the ``bench`` extra (``pip install 'rota[bench]'``: psutil, for the
CPU and memory of every process a bench reads). The product never imports it; the ``rota``
command finds ``rota bench`` through the ``rota.commands`` entry point (:mod:`rota_bench.cli`).
"""
