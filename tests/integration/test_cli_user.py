"""``mq user`` offline (before a secured broker's first start) and online, and the
connecting commands' ``--command-config`` with the password from the environment
(issue 19). Real ``mq serve`` and ``mq`` processes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from broker_process import BrokerProcess


def mq(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mq_cli.main", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def _listener(process: BrokerProcess, name: str) -> str:
    for line in process.output:
        found = re.search(rf"mq listener {name} on (\S+:\d+)", line)
        if found:
            return found[1]
    raise AssertionError(f"no {name} listener in {process.output}")


def test_users_offline_then_online_with_a_command_config(tmp_path: Path) -> None:
    data = tmp_path / "data"
    added = mq(
        "user", "add", "admin", "--password-stdin", "--data-dir", str(data), stdin="s3cret-admin\n"
    )
    assert added.returncode == 0, added.stderr
    assert "s3cret" not in added.stdout + added.stderr
    listed = mq("user", "list", "--data-dir", str(data))
    assert re.search(r"admin\s+SCRAM-SHA-256\s+8192", listed.stdout), listed.stdout + listed.stderr

    settings = {
        "listeners": ["plaintext://127.0.0.1:0", "sasl_plaintext://127.0.0.1:0"],
        "super_users": ["admin"],  # a SASL listener turns the ACLs on: admin may do anything
    }
    broker = BrokerProcess(data, settings=settings)
    broker.start()
    try:
        sasl = _listener(broker, "SASL_PLAINTEXT")
        plain = _listener(broker, "PLAINTEXT")
        config = tmp_path / "client.toml"
        config.write_text(
            'security_protocol = "SASL_PLAINTEXT"\n'
            'sasl_mechanism = "SCRAM-SHA-256"\n'
            'sasl_plain_username = "admin"\n'
        )
        env = {"MQ_SASL_PASSWORD": "s3cret-admin"}
        # the offline user logs in to the fresh broker
        created = mq(
            "topic", "create", "orders", "-b", sasl, "--command-config", str(config), env=env
        )
        assert created.returncode == 0, created.stderr
        # online: a second user through the broker
        added = mq(
            "user",
            "add",
            "bob",
            "--password-stdin",
            "--mechanism",
            "SCRAM-SHA-512",
            "-b",
            sasl,
            "--command-config",
            str(config),
            stdin="bob-pw\n",
            env=env,
        )
        assert added.returncode == 0, added.stderr
        listed = mq("user", "list", "-b", sasl, "--command-config", str(config), env=env)
        assert re.search(r"bob\s+SCRAM-SHA-512", listed.stdout), listed.stderr
        # the ACLs are on: anonymous on the plaintext listener may not list users
        refused = mq("user", "list", "-b", plain)
        assert "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr, refused.stderr
        # a wrong password: one clear line, no traceback
        wrong = mq(
            "topic",
            "list",
            "-b",
            sasl,
            "--command-config",
            str(config),
            env={"MQ_SASL_PASSWORD": "nope"},
        )
        assert wrong.returncode != 0
        assert "SASL_AUTHENTICATION_FAILED" in wrong.stderr
        assert "Traceback" not in wrong.stderr
        # without credentials the SASL listener serves nothing
        anonymous = mq("topic", "list", "-b", sasl)
        assert anonymous.returncode != 0
        # offline writes to a running broker's data dir are refused
        refused = mq("user", "add", "x", "--password-stdin", "--data-dir", str(data), stdin="pw\n")
        assert refused.returncode != 0
        assert "running" in refused.stderr
        admin = ("-b", sasl, "--command-config", str(config))
        deleted = mq("user", "delete", "bob", *admin, env=env)
        assert deleted.returncode == 0, deleted.stderr
        assert "bob" not in mq("user", "list", *admin, env=env).stdout
    finally:
        broker.stop()


def test_the_password_is_never_an_argument(tmp_path: Path) -> None:
    result = mq("user", "add", "x", "--data-dir", str(tmp_path / "d"))
    assert result.returncode != 0
    assert "--password-stdin" in result.stderr
