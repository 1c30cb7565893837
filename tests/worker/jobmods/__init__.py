"""Job modules imported by real `jobdesk worker` subprocesses in the acceptance tests."""
