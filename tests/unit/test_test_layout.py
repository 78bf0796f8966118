"""The test folders have no __init__.py, so pytest imports each test file by its bare name: two files with
one name in unit/ and integration/ stop the whole collection (CI on a950862 collected nothing)."""
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_name():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
