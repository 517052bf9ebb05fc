"""usermem.evals: one package, an optional extra, ground truth independent of the code under test (issue 11)."""

from __future__ import annotations

import ast
import inspect
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from usermem.evals import EVAL_EXTRA_HINT, MissingExtra
from usermem.evals import pii as pii_eval
from usermem.evals.pii import HANDWRITTEN, build_corpus, gb11643_check_character, luhn_check_digit
from usermem.policy.pii import PIIKind, cn_id_check_digit, luhn_ok

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("payload", "check"), [
    ("7992739871", "3"),  # the worked example of ISO/IEC 7812-1 (Luhn)
    ("411111111111111", "1"), ("555555555555444", "4"), ("37828224631000", "5"), ("620000000000000", "5"),
])
def test_luhn_check_digit_matches_published_numbers(payload, check):
    assert luhn_check_digit(payload) == check


@pytest.mark.parametrize(("first17", "check"), [
    ("11010519491231002", "X"),  # the sample number of GB 11643-1999
    ("32031119850615001", "1"), ("51010419770918306", "3"),
])
def test_gb11643_check_character(first17, check):
    assert gb11643_check_character(first17) == check


def test_independent_check_code_agrees_with_the_detector():
    """Written separately from usermem.policy.pii; they must agree (a disagreement is a bug in one of them)."""
    rng = random.Random(5)
    for _ in range(3000):
        payload = "".join(rng.choice("0123456789") for _ in range(rng.randint(11, 18)))
        assert luhn_ok(payload + luhn_check_digit(payload))
        assert not luhn_ok(payload + str((int(luhn_check_digit(payload)) + 1) % 10))
        first17 = "".join(rng.choice("0123456789") for _ in range(17))
        assert gb11643_check_character(first17) == cn_id_check_digit(first17)


def test_the_corpus_generator_does_not_use_the_detectors_own_validation():
    tree = ast.parse(inspect.getsource(pii_eval))
    from_policy = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                   and (node.module or "").startswith("usermem.policy") for alias in node.names}
    assert from_policy <= {"PIIKind", "detect"}, from_policy


def test_hand_written_forms_are_valid_and_in_every_corpus():
    for _, _, values in HANDWRITTEN:
        for kind, value in values:
            digits = "".join(ch for ch in value if ch.isalnum())
            if kind is PIIKind.BANK_CARD:
                assert luhn_check_digit(digits[:-1]) == digits[-1], value
            if kind is PIIKind.CN_ID:
                assert gb11643_check_character(digits[:17]) == digits[17].upper(), value
    corpus = build_corpus(seed=1, pii=60, benign=10)
    hand = [s for s in corpus if s.category == "handwritten"]
    assert len(hand) == len(HANDWRITTEN) and sum(1 for s in corpus if not s.benign) == 60
    for s in hand:
        for p in s.planted:  # the planted span is exactly the hand-written value
            assert any(s.text[p.start:p.end] == v for _, _, vals in HANDWRITTEN for _, v in vals)


def test_without_faker_the_corpus_raises_a_typed_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "faker", None)  # import faker -> ImportError
    with pytest.raises(MissingExtra) as err:
        build_corpus(pii=10, benign=10)
    assert EVAL_EXTRA_HINT in str(err.value) and err.value.package == "faker"


def test_eval_pii_without_faker_is_one_error_line_naming_the_extra(tmp_path):
    script = ("import sys; sys.modules['faker'] = None; sys.argv = ['usermem', 'eval', 'pii', '--out', sys.argv[1]];"
              "from usermem.interfaces.cli import main; main()")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", script, str(tmp_path)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "pip install 'usermem[eval]'" in lines[0]
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_old_import_path_still_works():
    from usermem import privacy_eval

    assert privacy_eval.build_corpus is build_corpus
