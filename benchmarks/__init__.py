"""Sonde's benchmark harness: what one hub holds and how fast it answers, on 127.0.0.1.

``python -m benchmarks`` runs the quick set (under 3 minutes), ``--full`` the
full set, ``--smoke`` tiny sizes for the test suite. Each scenario lives in
its own ``scenario_*`` module; see README.md for what each figure means.
"""
