"""Command-line tools: demo, isa_report, bench, autotune, accuracy (run as `python -m tools.<name>`)."""
