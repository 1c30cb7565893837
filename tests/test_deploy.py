"""The deployment files, read against the real CLI (Docker cannot run here).

Every `jobdesk` command line in `deploy/` — compose services, systemd units — must name
a subcommand that `jobdesk --help` lists and options that subcommand accepts; the
gunicorn app path must load with the shipped config; the Dockerfile must keep `jobdesk`
as PID 1 (exec-form ENTRYPOINT) so SIGTERM reaches the worker; stop timeouts must leave
room for the worker's shutdown grace period.
"""

from __future__ import annotations

import configparser
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from jobdesk.cli import cli
from jobdesk.shared.settings import known_names

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
JOBDESK = Path(sys.executable).with_name("jobdesk")
GUNICORN = Path(sys.executable).with_name("gunicorn")
APP_PATH = "jobdesk.dashboard:create_app()"


@pytest.fixture(scope="module")
def listed_commands() -> set[str]:
    """Subcommands as `jobdesk --help` prints them."""
    out = subprocess.run(
        [str(JOBDESK), "--help"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    section = out.split("Commands:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.strip()}


def check_jobdesk_args(args: list[str], listed: set[str]) -> click.Command:
    """`args` (after `jobdesk`) name a listed subcommand and only options it accepts."""
    assert args, "a jobdesk command line without a subcommand"
    name = args[0]
    assert name in listed, f"`jobdesk {name}` is not in `jobdesk --help`"
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    known |= {"--help", "-h"}
    for arg in args[1:]:
        if arg.startswith("-"):
            option = arg.split("=", 1)[0]
            assert option in known, f"`jobdesk {name}` has no option {option}"
    # Click itself must accept the whole line (types, ranges, required values).
    command.make_context(name, list(args[1:]), parent=click.Context(cli))
    return command


def option_value(args: list[str], option: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == option and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m)?", value.strip())
    assert match, f"unparsable duration {value!r}"
    return float(match.group(1)) * (60 if match.group(2) == "m" else 1)


# --- compose ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(yaml.safe_load((DEPLOY / "compose.yaml").read_text()))


def _jobdesk_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if str(service.get("image", "")).startswith("jobdesk") or "build" in service
    }


def test_compose_runs_migrate_worker_and_dashboard(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"postgres", "migrate", "worker", "dashboard"} <= set(services)
    assert services["migrate"]["restart"] == "no"
    for name in ("worker", "dashboard"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("postgres", "dashboard"):
        assert services[name]["healthcheck"]["test"], f"{name} has no health check"


@pytest.mark.slow
def test_compose_jobdesk_commands_exist(compose: dict[str, Any], listed_commands: set[str]) -> None:
    checked = 0
    for name, service in _jobdesk_services(compose).items():
        if "entrypoint" in service:
            continue  # not the jobdesk entrypoint (the dashboard runs gunicorn)
        command = service.get("command", ["worker"])
        args = shlex.split(command) if isinstance(command, str) else list(command)
        check_jobdesk_args(args, listed_commands)
        checked += 1
        assert name
    assert checked >= 2


def test_compose_worker_stops_after_its_shutdown_grace(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    grace = option_value(list(worker["command"]), "--shutdown-timeout")
    assert grace is not None
    assert seconds(worker["stop_grace_period"]) > float(grace)


def test_compose_dashboard_runs_gunicorn_with_the_app(compose: dict[str, Any]) -> None:
    dashboard = compose["services"]["dashboard"]
    assert dashboard["entrypoint"] == ["gunicorn"]
    args = list(dashboard["command"])
    assert args[-1] == APP_PATH
    assert option_value(args, "--config") == "/etc/jobdesk/gunicorn.conf.py"
    assert "JOBDESK_SECRET_KEY" in dashboard["environment"]
    health = " ".join(dashboard["healthcheck"]["test"])
    assert "/readyz" in health


def test_compose_environment_names_known_settings(compose: dict[str, Any]) -> None:
    for service in _jobdesk_services(compose).values():
        for key in service.get("environment", {}):
            assert_known_variable(key)


# --- Dockerfile --------------------------------------------------------------------------


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_dockerfile_uses_exec_form_and_a_non_root_user() -> None:
    steps = _instructions((DEPLOY / "Dockerfile").read_text())
    final_stage = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    entrypoints = [rest for keyword, rest in final_stage if keyword == "ENTRYPOINT"]
    assert entrypoints, "no ENTRYPOINT in the final stage"
    entrypoint = json.loads(entrypoints[-1])  # exec form is a JSON array; shell form fails
    assert entrypoint == ["jobdesk"]
    cmds = [rest for keyword, rest in final_stage if keyword == "CMD"]
    assert json.loads(cmds[-1]) == ["worker"]
    users = [rest for keyword, rest in final_stage if keyword == "USER"]
    assert users
    assert users[-1] not in ("root", "0")
    for keyword, rest in final_stage:
        if keyword == "COPY" and not rest.startswith("--from"):
            source = rest.split()[0]
            assert (ROOT / source).exists(), f"COPY source {source} is missing"


def test_docker_image_config_path_matches_compose(compose: dict[str, Any]) -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    config = option_value(list(compose["services"]["dashboard"]["command"]), "--config")
    assert f"COPY deploy/gunicorn.conf.py {config}" in dockerfile


# --- systemd -----------------------------------------------------------------------------


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "systemd" / name).read_text())
    return parser


def test_systemd_worker_unit_commands_exist(listed_commands: set[str]) -> None:
    service = _unit("jobdesk-worker.service")["Service"]
    for key in ("ExecStartPre", "ExecStart"):
        argv = shlex.split(service[key])
        assert argv[0].endswith("/jobdesk"), argv[0]
        check_jobdesk_args(argv[1:], listed_commands)
    start = shlex.split(service["ExecStart"])
    assert start[1] == "worker"
    grace = option_value(start, "--shutdown-timeout")
    assert grace is not None
    assert seconds(service["TimeoutStopSec"]) > float(grace)
    assert service["KillSignal"] == "SIGTERM"


def test_systemd_dashboard_unit_runs_gunicorn_on_loopback() -> None:
    service = _unit("jobdesk-dashboard.service")["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/gunicorn")
    assert argv[-1] == APP_PATH
    config = option_value(argv, "--config")
    assert config is not None
    assert config.endswith("deploy/gunicorn.conf.py")
    bind = option_value(argv, "--bind")
    assert bind is not None
    assert bind.startswith("127.0.0.1:")
    assert seconds(service["TimeoutStopSec"]) > 0


def test_units_read_the_documented_environment_file() -> None:
    for name in ("jobdesk-worker.service", "jobdesk-dashboard.service"):
        service = _unit(name)["Service"]
        assert service["EnvironmentFile"] == "/etc/jobdesk/jobdesk.env"
    for line in (DEPLOY / "jobdesk.env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert_known_variable(line.split("=", 1)[0])


# --- gunicorn ----------------------------------------------------------------------------


@pytest.mark.slow
def test_gunicorn_loads_the_app_with_the_shipped_config(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBDESK_")}
    env["JOBDESK_DATABASE_URL"] = f"sqlite:///{tmp_path / 'jobdesk.db'}"
    env["JOBDESK_SECRET_KEY"] = "deploy-test-" + "k7Qx9vR2mT5wZ8nB4cF6hJ1" * 2
    result = subprocess.run(
        [str(GUNICORN), "--check-config", "--config", str(DEPLOY / "gunicorn.conf.py"), APP_PATH],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_app_path_imports() -> None:
    module, _, call = APP_PATH.partition(":")
    factory = getattr(importlib.import_module(module), call.removesuffix("()"))
    assert callable(factory)


# --- helpers -----------------------------------------------------------------------------


def assert_known_variable(name: str) -> None:
    """A JOBDESK_* variable in a deploy file is one the settings schema declares."""
    if name.startswith("JOBDESK_") and name not in known_names():
        raise AssertionError(f"{name} is not a Jobdesk setting")


def test_the_checker_refuses_unknown_commands_and_options(listed_commands: set[str]) -> None:
    with pytest.raises(AssertionError, match="not in `jobdesk --help`"):
        check_jobdesk_args(["wroker"], listed_commands)
    with pytest.raises(AssertionError, match="has no option --threads"):
        check_jobdesk_args(["worker", "--threads", "8"], listed_commands)
    with pytest.raises(click.BadParameter):
        check_jobdesk_args(["worker", "--concurrency", "zero"], listed_commands)
