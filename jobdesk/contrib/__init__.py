"""Integrations with web frameworks that do not use SQLAlchemy (`jobdesk.contrib.django`)."""
