"""The mutation pass (tests/mutation.py, not run here: it takes minutes) follows the code it
mutates: each mutant's text occurs exactly once in its file, so no mutant is lost to an edit."""

from pathlib import Path

import mutation
import pytest


@pytest.mark.parametrize("mutant", mutation.MUTANTS, ids=lambda m: "%s:%s" % (m.area, m.find[:40]))
def test_each_mutant_finds_its_text_once(mutant: mutation.Mutant) -> None:
    source = (mutation.ROOT / mutant.file).read_text()
    assert source.count(mutant.find) == 1, (mutant.file, mutant.find)
    for test in mutant.tests:
        assert (mutation.ROOT / test).exists(), test


def test_the_pass_runs_the_suite_of_the_copy() -> None:
    assert Path(mutation.__file__).resolve().parent == mutation.ROOT / "tests"
