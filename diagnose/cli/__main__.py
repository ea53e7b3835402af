"""`python -m diagnose.cli`, as `python -m diagnose`."""

from diagnose.cli import main

main()
