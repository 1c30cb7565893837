"""`jobdesk keys …`: the Fernet keys that seal job secrets — make one, and seal every
stored secret again with the first key of `JOBDESK_ENCRYPTION_KEYS`."""

from __future__ import annotations

import click

from jobdesk.cli.app import cli, command_engine, user_errors

ROTATE_BATCH = 500


@cli.group()
def keys() -> None:
    """Keys of job secrets (JOBDESK_ENCRYPTION_KEYS): generate one, rotate to the first."""


@keys.command("generate")
def generate() -> None:
    """Print a new key (the url-safe base64 of 32 random bytes). Put it first in
    JOBDESK_ENCRYPTION_KEYS, keep the old keys after it, then run `jobdesk keys rotate`."""
    from jobdesk.shared.secrets.keys import generate_key

    click.echo(generate_key())


@keys.command("rotate")
@click.option(
    "--batch",
    type=click.IntRange(1, 10_000),
    default=ROTATE_BATCH,
    show_default=True,
    help="Secrets sealed again per transaction.",
)
@click.pass_context
@user_errors
def rotate(ctx: click.Context, batch: int) -> None:
    """Seal every stored job secret again with the first key of JOBDESK_ENCRYPTION_KEYS,
    one transaction per batch. Safe to stop and run again: it starts over, and a secret
    already sealed with the first key is only sealed again. Afterwards the old keys can
    be dropped from the list (every process needs the new list)."""
    from jobdesk.shared.secrets.keys import KeysError, sealer_for
    from jobdesk.shared.secrets.store import reseal_batch
    from jobdesk.shared.settings import Settings

    done = 0
    after = None
    try:
        sealer = sealer_for(Settings.from_env().encryption_keys)
        with command_engine(ctx) as engine:
            while True:
                with engine.begin() as conn:
                    step = reseal_batch(conn, sealer, after, batch)
                done += step.resealed
                if step.after is None:
                    break
                after = step.after
                click.echo(f"  {done:,} sealed again …", err=True)
    except KeysError as exc:
        # What was sealed again before stays so; a rerun goes over it harmlessly.
        before = f" ({done:,} sealed again before this)" if done else ""
        raise click.ClickException(f"{exc}{before}") from None
    click.echo(f"{done:,} secret{'s' if done != 1 else ''} sealed with the first key")
