"""`jobdesk check` and `jobdesk alerts …`: alerts from the terminal, for cron and monitoring.

`jobdesk check` exits 0 when no alert is open and 1 when any is (printing them), so a
cron job, a Nagios-style probe or a container health check can page on it. With
`--evaluate` it first runs the alert rules itself (safe next to a running leader: the
alerts table de-duplicates).
"""

from __future__ import annotations

from typing import Any

import click

from jobdesk.cli.app import cli, echo_json, engine_from, limit_option, user_errors


def _alert_dict(row: Any) -> dict[str, Any]:
    data = dict(row._mapping)
    for key in ("opened_at", "last_seen_at", "resolved_at", "acknowledged_at"):
        if data.get(key) is not None:
            data[key] = data[key].isoformat()
    return data


def _alert_line(alert: dict[str, Any]) -> str:
    when = alert["opened_at"][:19].replace("T", " ")
    line = (
        f"#{alert['id']} [{alert['status']}] {alert['rule']} {alert['subject']} "
        f"since {when} UTC (count {alert['count']}): {alert['message']}"
    )
    if alert.get("acknowledged_by"):
        line += f" — acknowledged by {alert['acknowledged_by']}"
    return line


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--evaluate", is_flag=True, help="Run the alert rules now before checking (as the leader)."
)
@click.pass_context
@user_errors
def check(ctx: click.Context, as_json: bool, evaluate: bool) -> None:
    """Exit 1 and list the open alerts if there are any; exit 0 when all is well."""
    from jobdesk.shared.alerts.store import list_alerts
    from jobdesk.shared.settings import Settings

    engine = engine_from(ctx)
    try:
        if evaluate:
            from jobdesk.worker.maintenance.alerter import run_once

            run_once(engine, None, Settings.from_env())
        with engine.connect() as conn:
            rows = [_alert_dict(r) for r in list_alerts(conn, status="open", limit=1000)]
    finally:
        engine.dispose()
    if as_json:
        echo_json({"ok": not rows, "open_alerts": rows})
    elif rows:
        click.echo(f"{len(rows)} open alert{'s' if len(rows) != 1 else ''}:")
        for alert in rows:
            click.echo(_alert_line(alert))
    else:
        click.echo("ok: no open alerts")
    ctx.exit(1 if rows else 0)


@cli.group()
def alerts() -> None:
    """Alerts raised by the maintenance checks (dead-letter spikes, stalled queues, …)."""


@alerts.command("list")
@click.option(
    "--status",
    type=click.Choice(["open", "resolved", "all"]),
    default="open",
    show_default=True,
    help="Which alerts to show.",
)
@click.option("--rule", help="Only this rule (e.g. dead_letter_spike).")
@limit_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
@user_errors
def list_command(
    ctx: click.Context, status: str, rule: str | None, limit: int, as_json: bool
) -> None:
    """List alerts, newest first."""
    from jobdesk.shared.alerts.store import list_alerts

    engine = engine_from(ctx, sqlite_begin="DEFERRED")
    wanted = None if status == "all" else status
    try:
        with engine.connect() as conn:
            rows = list_alerts(conn, status=wanted, rule=rule, limit=limit)
            data = [_alert_dict(r) for r in rows]
    finally:
        engine.dispose()
    if as_json:
        echo_json(data)
        return
    if not data:
        click.echo(f"no {'' if status == 'all' else status + ' '}alerts")
    for alert in data:
        click.echo(_alert_line(alert))


@alerts.command("rules")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@user_errors
def rules_command(as_json: bool) -> None:
    """Show every alert rule with its current thresholds and their variables."""
    from jobdesk.shared.settings import Settings
    from jobdesk.shared.settings.alerts import AlertConfig, describe

    config = AlertConfig.from_settings(Settings.from_env())
    rows = describe(config)
    if as_json:
        echo_json(
            {
                "rules": rows,
                "email": config.email,
                "webhook_endpoint": config.webhook_endpoint,
                "interval_seconds": config.interval_seconds,
            }
        )
        return
    for row in rows:
        click.echo(f"{row['rule']}: {row['description']}")
        for name, param in row["params"].items():
            click.echo(f"  {name:<20} {param['value']!s:<10} {param['env']}")
    click.echo(f"delivery: email={config.email or '-'} webhook={config.webhook_endpoint or '-'}")
