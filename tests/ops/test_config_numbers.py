"""A number in a config file means what the same number means on the command line: every setting a
.toml or .py file can give as a number, resolved both ways (--print-config json) and compared. The
mode of a socket is the one setting whose text is not decimal: there the number is the mode it is."""
import json

import pytest

from helpers import run_cli

from m0serve.config import OPTIONS, _octal_mode, _seconds

# A value each numeric setting accepts, and what the command line needs to go with it.
NEEDS = {"uds_permissions": ["--uds", "x.sock"], "max_requests_jitter": ["--max-requests", "10"],
         "port": [], "fd": [], "metrics_port": []}
SKIP = {"fd"}  # an inherited socket: nothing to bind in this test


def _numeric():
    for opt in OPTIONS:
        if opt.kind != "value" or opt.dest in SKIP:
            continue
        conv = opt.conv
        if getattr(conv, "__name__", "") == "integer":
            yield pytest.param(opt, 3 if opt.dest not in ("port", "metrics_port") else 8123, id=opt.dest)
        elif conv is _seconds:
            yield pytest.param(opt, 2.5, id=opt.dest)
        elif conv is _octal_mode:
            yield pytest.param(opt, 0o640, id=opt.dest)


def _resolved(*args):
    r = run_cli("cli_hello:app", *args, "--print-config", "json")
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)


@pytest.mark.parametrize("ext", [".toml", ".py"])
@pytest.mark.parametrize("opt, number", list(_numeric()))
def test_a_number_in_a_config_file_means_what_it_means_on_the_command_line(tmp_path, ext, opt, number):
    text = f"0o{number:o}" if opt.conv is _octal_mode else repr(number)
    conf = tmp_path / ("m0" + ext)
    conf.write_text(f"{opt.dest} = {text}\n")
    from_file = _resolved("-c", str(conf), *NEEDS.get(opt.dest, []))
    flag_text = f"{number:o}" if opt.conv is _octal_mode else str(number)
    from_flag = _resolved(opt.flag, flag_text, *NEEDS.get(opt.dest, []))
    assert from_file[opt.dest] == from_flag[opt.dest], (opt.dest, from_file[opt.dest], from_flag[opt.dest])
    if opt.conv is _octal_mode:
        assert from_file[opt.dest] == "0640"


def test_every_numeric_setting_is_covered():
    """A new numeric conversion must be added here (and given the same check)."""
    covered = {p.id for p in _numeric()}
    numeric = {o.dest for o in OPTIONS if o.kind == "value" and o.dest not in SKIP and (
        getattr(o.conv, "__name__", "") == "integer" or o.conv in (_seconds, _octal_mode))}
    assert covered == numeric and len(covered) > 20, covered
