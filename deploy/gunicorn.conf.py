"""gunicorn settings for the Jobdesk dashboard:

    gunicorn -c deploy/gunicorn.conf.py 'jobdesk.dashboard:create_app()'

- `gthread` workers: page requests wait on the database, so a few threads per process
  serve concurrent operators cheaply;
- no `preload_app`: each worker process builds its own app and database pool after the
  fork (a pool created before fork would share sockets between processes);
- bind to loopback by default: put a TLS-terminating reverse proxy in front and list
  its addresses or networks in `JOBDESK_TRUSTED_PROXIES` (default loopback). gunicorn's
  `forwarded_allow_ips` is derived from that one setting, so gunicorn and the dashboard
  agree on whose `X-Forwarded-Proto` marks requests secure (the session cookie then
  gets the Secure flag) and whose `X-Forwarded-For` names the client.

The `JOBDESK_DASHBOARD_BIND` / `_WORKERS` / `_THREADS` and `JOBDESK_TRUSTED_PROXIES`
settings are read (and checked) like every other Jobdesk setting. Every value can be
overridden with the usual `GUNICORN_CMD_ARGS` or command-line flags (do not widen
`--forwarded-allow-ips` beyond `JOBDESK_TRUSTED_PROXIES`: the dashboard would not follow).
"""

from jobdesk.shared.settings import Settings

_settings = Settings.from_env()

bind = _settings.dashboard_bind
worker_class = "gthread"
workers = _settings.dashboard_workers
threads = _settings.dashboard_threads
preload_app = False
timeout = 30
graceful_timeout = 20
keepalive = 5
# Request line and header limits well above what the dashboard needs, below abuse.
limit_request_line = 8190
limit_request_fields = 100
# Normalised networks (gunicorn >= 22 accepts them); an empty list trusts no proxy.
forwarded_allow_ips = ",".join(_settings.trusted_proxy_networks())
accesslog = "-"
errorlog = "-"
# Never log query strings with secrets: the dashboard puts none there, but keep it short.
access_log_format = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(M)sms'
