"""The README is a front page: what m0serve is, then a quick start whose commands work, within the first
screenful; the reference lives in docs/. Every relative link of the README and docs/ resolves, anchors
included (the reference moved out of the README once)."""
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def _first_serving_line(text):
    """The 1-based line number of the first `m0serve APP` command in a code block, and the command."""
    in_block = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block and re.match(r"m0serve [\w.]+:\w+", line.strip()):
            return n, line.split("#")[0].strip()
    return None, None


def test_a_newcomer_reaches_the_command_that_serves_their_app_in_the_first_screenful():
    text = README.read_text()
    n, command = _first_serving_line(text)
    assert command == "m0serve myproject.wsgi:application", command
    assert n <= 30, n  # what it is, how to install it, then the command
    before = "\n".join(text.splitlines()[:n])
    assert "pip install ~/src/m0serve" in before  # installed from a checkout into the app's venv
    assert len(text.splitlines()) <= 200


def test_the_quick_start_has_the_https_variant_and_the_two_development_commands():
    text = README.read_text()
    quick = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]
    assert "--ssl-certfile cert.pem --ssl-keyfile key.pem" in quick
    dev = [line.split("#")[0].strip() for line in quick.splitlines() if line.startswith("make ")]
    assert dev == ["make serve", "make test"], dev


def test_the_quick_start_commands_resolve(tmp_path):
    """Its m0serve commands, run in a project that has myproject/wsgi.py, are valid configurations."""
    pkg = tmp_path / "myproject"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "wsgi.py").write_text(textwrap.dedent("""
        def application(environ, start_response):
            start_response("200 OK", [])
            return [b"ok"]
    """))
    try:
        import trustme
    except ImportError:  # a free-threaded interpreter (see tests/engine/test_tls.py)
        import openssl_pki as trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    cert.private_key_pem.write_to_path(tmp_path / "key.pem")
    text = README.read_text()
    quick = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]
    commands = [line.split("#")[0].strip() for line in quick.splitlines() if re.match(r"m0serve [\w.]+:\w+", line)]
    assert len(commands) >= 2, commands
    for command in commands:
        args = shlex.split(command)[1:]
        args = [str(tmp_path / a) if a.endswith(".pem") else a for a in args]
        r = run_cli(*args, "--app-dir", str(tmp_path), "--check-config")
        assert r.returncode == 0, (command, r.stderr)


def _slug(heading):
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group(0) == "_" else "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert not broken, broken
