"""One ``--json`` envelope for every command that prints JSON (issue 30, item 6): each
command's output validated against ``attndyn._cli_common.JSON_SCHEMA`` and its documented
``result`` keys, and the schema printed in docs/cli.md equal to the program's."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from attndyn._cli_common import JSON_SCHEMA, RESULT_KEYS, SCHEMA
from attndyn.cli import main

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "cli.md"
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int,
         "number": (int, float), "null": type(None)}


def validate(obj, schema, where="$") -> list:
    """The errors of ``obj`` against the JSON-Schema subset the envelope uses (type, const,
    required, properties, additionalProperties, items)."""
    errs = []
    if "const" in schema and obj != schema["const"]:
        errs.append(f"{where}: {obj!r} != {schema['const']!r}")
    t = schema.get("type")
    if t is not None:
        ok = isinstance(obj, TYPES[t]) and not (t in ("integer", "number")
                                                 and isinstance(obj, bool))
        if not ok:
            return errs + [f"{where}: not of type {t}: {obj!r}"]
    if isinstance(obj, dict):
        errs += [f"{where}: missing {k}" for k in schema.get("required", ()) if k not in obj]
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            errs += [f"{where}: unexpected key {k}" for k in obj if k not in props]
        for k, sub in props.items():
            if k in obj:
                errs += validate(obj[k], sub, f"{where}.{k}")
    if isinstance(obj, list) and "items" in schema:
        for i, x in enumerate(obj):
            errs += validate(x, schema["items"], f"{where}[{i}]")
    return errs


def check_output(text: str, command: str) -> dict:
    """``text`` is one line of strict JSON that fits the schema; returns it."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, text[:500]

    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    env = json.loads(lines[0], parse_constant=no_constants)
    assert validate(env, JSON_SCHEMA) == []
    assert env["command"] == command and env["schema"] == SCHEMA
    missing = [k for k in RESULT_KEYS[command] if k not in env["result"]]
    assert not missing, missing
    return env


# commands whose modules still print their own JSON layout (none left: paper 000's scaling
# and transformer moved to print_json, tests/cli/test_cli_json_paper000.py)
PENDING: set = set()


def test_every_json_command_has_a_documented_result():
    import argparse

    from attndyn.cli import _parser
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))

    def has_json(sp):
        nested = [a for a in sp._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = list(nested[0].choices.values()) if nested else [sp]
        return any("--json" in a.option_strings for p in parsers for a in p._actions)
    with_json = {name for name, sp in sub.choices.items() if has_json(sp)}
    assert set(RESULT_KEYS) <= with_json
    assert with_json - set(RESULT_KEYS) <= PENDING, with_json - set(RESULT_KEYS)


def test_validator_rejects_what_it_should():
    good = {"schema": SCHEMA, "command": "x", "attndyn": "0", "status": 0, "ok": True,
            "message": "", "saved": [], "result": {}}
    assert validate(good, JSON_SCHEMA) == []
    for bad in ({**good, "schema": "other"}, {**good, "status": True}, {**good, "extra": 1},
                {**good, "saved": [None]}, {k: v for k, v in good.items() if k != "result"}):
        assert validate(bad, JSON_SCHEMA), bad


def test_docs_print_the_schema():
    text = DOCS.read_text()
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    assert any(json.loads(b) == JSON_SCHEMA for b in blocks), "docs/cli.md: schema differs"
    table = text[text.index("| command | `result` keys |"):]
    for command, keys in RESULT_KEYS.items():  # every command's result keys are documented
        row = next((ln for ln in table.splitlines() if ln.startswith(f"| `{command}`")), None)
        assert row is not None, command
        assert all(f"`{k}`" in row for k in keys), (command, row)


def test_integrate_json(tmp_path, capsys):
    rc = main(["integrate", "--order", "4", "--t-end", "0.02", "--n-out", "3",
               "--out", str(tmp_path / "r.npz"), "--json"])
    env = check_output(capsys.readouterr().out, "integrate")
    assert rc == 0 and env["ok"] and env["saved"] == [str(tmp_path / "r.npz")]
    assert env["result"]["model"]["kind"] == "tied" and len(env["result"]["t"]) == 3
    assert set(env["result"]["observables"]) == {"mu_1", "mu_2", "q_11", "q_12", "q_22"}


def test_integrate_untied_json(tmp_path, capsys):
    rc = main(["integrate", "--model", "untied", "--order", "2", "--d", "20", "--t-end", "0.02",
               "--n-out", "2", "--out", str(tmp_path / "u.npz"), "--json"])
    env = check_output(capsys.readouterr().out, "integrate")
    assert rc == (0 if env["ok"] else 1) and env["result"]["model"]["kind"] == "untied"


@pytest.mark.parametrize("command", ["sgd", "compare"])
def test_sgd_compare_json(command, capsys):
    rc = main([command, "--eta", "0.01", "--d", "12", "--batch", "4", "--t-end", "0.02",
               "--n-out", "2", "--no-progress", "--json"])
    env = check_output(capsys.readouterr().out, command)
    assert rc == 0 and env["status"] == 0 and env["saved"] == []
    assert env["result"]["params"]["d"] == 12


def test_verify_json(capsys):
    assert main(["verify", "--list", "--json"]) == 0
    env = check_output(capsys.readouterr().out, "verify")
    assert "trunc" in [c["check"] for c in env["result"]["checks"]]
    rc = main(["verify", "--orders", "2,4", "--d", "8", "--t-end", "0.01", "--json"])
    env = check_output(capsys.readouterr().out, "verify")
    assert rc == env["status"] == (0 if env["ok"] else 1)
    assert [c["check"] for c in env["result"]["checks"]] == ["trunc"]


def test_sweep_json(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('function = "bounds"\n[fixed]\nxi = 0.1\nN = 1e4\n[grid]\nC = [1e10]\n')
    rc = main(["sweep", str(spec), "--out", str(tmp_path / "s.sweep"), "--workers", "1",
               "--no-progress", "--json"])
    env = check_output(capsys.readouterr().out, "sweep")
    assert rc == 0 and env["result"]["n_points"] == 1 and env["result"]["failed"] == []


class _Claim:
    def as_dict(self):
        return {"claim": "c", "verdict": "held", "measured": float("nan"),
                "bound": float("inf")}


class _Figure:
    all_held = True
    claims = [_Claim()]

    def save(self, out, pdf=False, dpi=90):
        return {"png": f"{out}/f.png", "json": f"{out}/f.json", "curves": []}

    def table(self):
        return "table"


def test_reproduce_json_envelope(tmp_path, capsys, monkeypatch):
    """The envelope of ``reproduce`` around a stand-in figure (the real figures run for
    minutes; ``test_reproduce_json_real`` runs one): NaN becomes null, inf the string inf."""
    from attndyn import _cli_reproduce

    monkeypatch.setattr(_cli_reproduce, "_builder", lambda name: lambda mode, **kw: _Figure())
    assert main(["reproduce", "fig4", "--mini", "--out", str(tmp_path), "--json"]) == 0
    env = check_output(capsys.readouterr().out, "reproduce")
    [fig] = env["result"]["figures"]
    assert fig["claims"][0]["measured"] is None and fig["claims"][0]["bound"] == "inf"
    assert env["saved"] == [f"{tmp_path}/f.json", f"{tmp_path}/f.png"]


@pytest.mark.slow
def test_reproduce_json_real(tmp_path, capsys):
    rc = main(["reproduce", "scaling", "--mini", "--out", str(tmp_path), "--dpi", "30",
               "--json"])
    env = check_output(capsys.readouterr().out, "reproduce")
    assert rc == 0 and env["ok"] and env["result"]["figures"][0]["figure"] == "scaling"
