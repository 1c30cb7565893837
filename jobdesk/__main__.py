"""`python -m jobdesk` is the `jobdesk` command."""

from jobdesk.cli import main

main()
