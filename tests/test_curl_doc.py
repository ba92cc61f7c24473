"""docs/protocol.md "Talk to the API with curl", run as written: the test reads the steps' code
block and carries out each ``curl`` line (its method, headers, form or JSON body, cookie jar) and
the ``room member token`` line against a real server subprocess, so the doc cannot drift from the
login form field, the CSRF header or the bearer token the server really takes."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import pytest

from room.cli import main as room_main
from tests.support.doctables import DOCS
from tests.support.server import ServerProcess

MARK = "<!-- steps: curl -->"


def steps() -> list[str]:
    """The commands of the doc's block: comments and blank lines out, one command a line."""
    lines = (DOCS / "protocol.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(MARK) + 1
    assert lines[start] == "```sh"
    block = lines[start + 1 : lines.index("```", start + 1)]
    return [line for line in block if line.strip() and not line.lstrip().startswith("#")]


def expand(text: str, env: Mapping[str, str]) -> str:
    def value(found: re.Match[str]) -> str:
        name = found.group(1) or found.group(2)
        assert name in env, f"the doc uses ${name} before any step gives it"
        return env[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, text)


@dataclass
class Answer:
    status: int
    headers: Any
    body: Any


@dataclass
class Curl:
    """The part of curl the steps use: -s, -o, -c/-b (a cookie jar), -H, -d, one URL; no
    redirect followed (curl's default)."""

    jars: dict[str, dict[str, str]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str], str | None]] = field(default_factory=list)

    def run(self, args: list[str], env: Mapping[str, str]) -> Answer:
        assert args[0] == "curl"
        headers: dict[str, str] = {}
        data: str | None = None
        url = ""
        save = send = None
        words = iter(args[1:])
        for word in words:
            if word == "-s":
                continue
            if word == "-o":
                next(words)
            elif word == "-c":
                save = next(words)
            elif word == "-b":
                send = next(words)
            elif word == "-H":
                name, _, value = expand(next(words), env).partition(":")
                headers[name.strip()] = value.strip()
            elif word == "-d":
                data = expand(next(words), env)
            else:
                assert not word.startswith("-"), f"an option the test does not know: {word}"
                url = expand(word, env)
        if data is not None:
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        if send is not None:
            jar = self.jars.get(send, {})
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        method = "POST" if data is not None else "GET"
        self.seen.append((method, url, headers, data))
        request = urllib.request.Request(
            url, data=None if data is None else data.encode(), headers=headers, method=method
        )
        opener = urllib.request.build_opener(NoRedirect)
        try:
            with opener.open(request, timeout=10) as r:
                answer = Answer(r.status, r.headers, r.read())
        except urllib.error.HTTPError as exc:
            answer = Answer(exc.code, exc.headers, exc.read())
        if save is not None:
            jar = self.jars.setdefault(save, {})
            for line in answer.headers.get_all("Set-Cookie") or []:
                jar.update({k: m.value for k, m in SimpleCookie(line).items()})
        with contextlib.suppress(ValueError):
            answer.body = json.loads(answer.body)
        return answer


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def room_command(line: str, server: ServerProcess) -> str:
    """``NAME=$(room …)``: the command run in-process, ``--data`` pointed at the test's server."""
    inner = re.fullmatch(r"\w+=\$\((room .*)\)", line)
    assert inner, line
    args = shlex.split(inner.group(1))[1:]
    args[args.index("--data") + 1] = str(server.data)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert room_main(args) == 0
    return out.getvalue().strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("curl") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


def test_the_curl_steps_work_as_written(server: ServerProcess) -> None:
    env: dict[str, str] = {"SECRET": server.fresh_login_secret()}
    curl = Curl()
    answers: list[Answer] = []
    for line in steps():
        name = re.match(r"(\w+)=", line)
        if name and line.startswith(f"{name.group(1)}=$("):
            env[name.group(1)] = room_command(line, server)
            continue
        if name:
            assert name.group(1) == "ROOM" and line == "ROOM=http://127.0.0.1:8470", line
            env["ROOM"] = server.origin  # the test's server listens elsewhere
            continue
        answer = curl.run(shlex.split(line), env)
        answers.append(answer)
        if curl.seen[-1][1].endswith("/api/me"):
            env["CSRF"] = answer.body["csrf_token"]
            env["PROJECT"] = str(answer.body["projects"][0]["id"])
    login, me, sent, history, agent_sent = answers
    # 1. the form field "secret" signs in: 303 and the session cookie
    assert login.status == 303
    assert "room_session" in curl.jars["jar.txt"]
    assert curl.seen[0][3] is not None and curl.seen[0][3].startswith("secret=")
    # 2. the person, the project, the CSRF token
    assert me.status == 200 and me.body["identity"]["kind"] == "human"
    assert me.body["projects"][0]["name"] == "演示项目"
    # 3. sent with the cookie and the CSRF header
    assert sent.status == 201, sent.body
    assert sent.body["message"]["body"] == "@lead 你好"
    assert "X-CSRF-Token" in curl.seen[2][2]
    # 4. the history holds it
    assert history.status == 200
    assert "@lead 你好" in [m["body"] for m in history.body["messages"]]
    # 5. the agent's bearer token: the message is the lead's
    assert agent_sent.status == 201, agent_sent.body
    lead = agent_sent.body["message"]["author_id"]
    members = server.get_json(
        f"/api/projects/{env['PROJECT']}", cookie=curl.jars["jar.txt"]["room_session"]
    )["members"]
    assert {m["id"]: m["handle"] for m in members}[lead] == "lead"
    assert "Cookie" not in curl.seen[4][2]


def test_without_the_csrf_header_a_cookie_mutation_is_refused(server: ServerProcess) -> None:
    """What the doc says happens when step 3 leaves the header out: ``403 csrf``."""
    env: dict[str, str] = {"SECRET": server.fresh_login_secret(), "ROOM": server.origin}
    curl = Curl()
    login, me, send = [line for line in steps() if line.startswith("curl")][:3]
    curl.run(shlex.split(login), env)
    answer = curl.run(shlex.split(me), env)
    env["CSRF"], env["PROJECT"] = "", str(answer.body["projects"][0]["id"])
    args = shlex.split(send)
    at = args.index("-H")
    assert args[at + 1].startswith("X-CSRF-Token")
    refused = curl.run(args[:at] + args[at + 2 :], env)
    assert refused.status == 403 and refused.body["error"]["code"] == "csrf"
