"""One ``ModelSpec`` parsed once from one shared set of model options, one builder for the
three parameterisations, one module per action (issue 24, item 5)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import pathlib

import pytest

from attndyn import _cli_common as common
from attndyn.cli import COMMANDS, _parser

ROOT = pathlib.Path(common.__file__).resolve().parent
MODEL_OPTIONS = ("--model", "--K", "--trainable", "--L", "--loss", "--C", "--weight-decay")
# commands of the other modules (paper 000) take no attention model
WITH_MODEL = ("derive", "integrate", "verify", "sgd", "compare")


def _sub(name):
    p = _parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def test_one_module_per_action():
    for name, (module, _) in COMMANDS.items():
        assert module == f"attndyn._cli_{name}", (name, module)
    assert not (ROOT / "_cli_tied.py").exists() and not (ROOT / "_cli_untied.py").exists()


def test_model_options_declared_once_and_the_same_everywhere():
    helps = {}
    for name in WITH_MODEL:
        opts = {s: a for a in _sub(name)._actions for s in a.option_strings}
        for o in MODEL_OPTIONS[1:]:
            assert o in opts, (name, o)
            helps.setdefault(o, set()).add(opts[o].help)
            assert opts[o].default is None, (name, o)  # filled in by model_spec
    assert all(len(h) == 1 for h in helps.values()), helps
    # declared in one place only: no other CLI module adds a model option itself
    for path in ROOT.glob("_cli_*.py"):
        if path.name in ("_cli_common.py", "_cli_transformer.py", "_cli_scaling.py"):
            continue
        text = path.read_text()
        for o in MODEL_OPTIONS:
            assert f'add_argument("{o}"' not in text, (path.name, o)


def test_models_built_in_one_place():
    """Only ``model_from_spec`` names the model classes; every other CLI module builds
    through it."""
    for path in ROOT.glob("_cli_*.py"):
        if path.name in ("_cli_transformer.py", "_cli_scaling.py"):
            continue
        tree = ast.parse(path.read_text())
        calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
                 for n in ast.walk(tree) if isinstance(n, ast.Call)}
        named = calls & {"TiedModel", "UntiedModel", "SModel"}
        assert not named or path.name == "_cli_common.py", (path.name, named)
        # model classes and drivers come from the public faces only
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {a.name for a in node.names}
                if names & {"TiedModel", "UntiedModel", "SModel", "sgd", "compare",
                            "gaussian_init", "matrix_flow", "limit_flow", "load_result"}:
                    assert node.module in ("attndyn", "attndyn.numeric"), (path.name,
                                                                           node.module)


def _spec(argv, command="sgd"):
    args = _parser().parse_args([command, *argv] + (["--eta", "0.1"]
                                                    if command in ("sgd", "compare") else []))
    return common.model_spec(args)


def test_spec_parsed_and_validated_once():
    s = _spec([])
    assert dataclasses.is_dataclass(s) and s.kind == "tied" and s.K == 2
    assert s.trainable == (0,) and s.L == 1 and s.loss == "square" and s.weight_decay == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.K = 3
    s = _spec(["--model", "s", "--K", "3", "--trainable", "0,1", "--L", "2", "--loss", "h2",
               "--C", "1,0.5;0.5,1", "--weight-decay", "0.5"])
    assert (s.kind, s.K, s.trainable, s.L, s.C, s.weight_decay) == (
        "s", 3, (0, 1), 2, ((1.0, 0.5), (0.5, 1.0)), 0.5)
    assert s == _spec(["--model", "s", "--K", "3", "--trainable", "0,1", "--L", "2", "--loss",
                       "h2", "--C", "1,0.5;0.5,1", "--weight-decay", "0.5"])
    assert s.as_dict()["C"] == [[1.0, 0.5], [0.5, 1.0]]
    # the same options, the same spec, whichever command reads them
    assert _spec(["--K", "3", "--loss", "h2"], "derive") == _spec(["--K", "3", "--loss", "h2"])
    with pytest.raises(ValueError, match="--model must be one of tied here"):
        common.model_spec(argparse.Namespace(model="s", _model_kinds=("tied",)))
    with pytest.raises(ValueError, match=r"--C must be an L x L matrix \(L = 1\)"):
        _spec(["--C", "1,0;0,1"])


@pytest.mark.parametrize("kind,cls", [("tied", "TiedModel"), ("untied", "UntiedModel"),
                                      ("s", "SModel")])
def test_one_builder_for_the_three_parameterisations(kind, cls):
    import attndyn

    spec = _spec(["--model", kind, "--loss", "h2", "--weight-decay", "0.25"])
    model = common.model_from_spec(spec)
    assert type(model) is getattr(attndyn, cls)
    assert model.K == 2 and tuple(model.trainable) == (0,) and model.weight_decay == 0.25
