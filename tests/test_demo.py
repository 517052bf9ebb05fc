import io

from rich.console import Console

from usermem import Memory
from usermem.interfaces.demo import run_demo


def test_seed_demo_decisions_and_recalls():
    out = run_demo(Memory(), Console(file=io.StringIO()))
    assert out["decisions"] == ["ADD", "ADD", "ADD", "REJECT", "UPDATE", "REJECT"]
    assert out["plan_history"] == [("年付专业版", "system"), ("月付基础版", "system")]
    assert {k for k, _ in out["day3"]} == {"plan", "contact", "open_issue"}
    assert out["day3"][0] == ("plan", "月付基础版")  # importance defaults per kind (the seed's known flaw fixed)
    assert out["day40"] == [("plan", "月付基础版"), ("contact", "只接受邮件,不要打电话")]
    assert out["erased"] == 4
    assert out["after"] == []
