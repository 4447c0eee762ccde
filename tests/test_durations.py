"""The order in which xdist hands out the suite's work: measured costs, the longest unit first (tests/_durations.py)."""

from __future__ import annotations

import _durations as durations  # tests/ is on sys.path (the rootdir's conftest)
import pytest
from conftest import _longest_first

LOG = """
============================= slowest durations ==============================
19.51s call     tests/test_warnings.py::test_dp@data_parallel
0.40s setup    tests/test_bench.py::test_quick@bench
18.34s call     tests/test_bench.py::test_quick@bench
0.01s teardown tests/test_bench.py::test_quick@bench
1994 passed in 218.02s (0:03:38)
"""


def test_a_durations_log_gives_each_tests_setup_call_and_teardown_summed() -> None:
    assert durations.parse(LOG) == pytest.approx({"tests/test_warnings.py::test_dp": 19.51,
                                                  "tests/test_bench.py::test_quick": 18.75})  # fmt: skip


def test_a_log_without_durations_is_refused() -> None:
    with pytest.raises(ValueError, match="expected pytest's --durations=0 lines"):
        durations.parse("1994 passed in 218.02s")


def test_units_are_ordered_by_their_summed_cost_and_unknown_tests_cost_the_default() -> None:
    units = {"a": ["t1"], "b": ["t2", "t3"], "c": ["t4"], "d": ["t5"]}
    costs = {"t1": 1.0, "t2": 0.6, "t3": 0.6, "t4": 3.0}
    assert durations.order(units, costs) == ["c", "b", "a", "d"]  # t5: DEFAULT_S
    assert durations.order({"x": ["u"], "y": ["v"]}, {}) == ["x", "y"]  # equal costs keep collection order


class _Item:
    def __init__(self, nodeid: str, group: str | None = None) -> None:
        self.nodeid, self._group = nodeid, group

    def get_closest_marker(self, name: str):
        return pytest.mark.xdist_group(self._group).mark if self._group and name == "xdist_group" else None


def test_a_group_stays_together_and_the_costliest_unit_goes_first(monkeypatch) -> None:
    costs = {"t::slow": 9.0, "t::g1": 2.0, "t::g2": 2.5}
    monkeypatch.setattr(durations, "load", lambda: costs)
    items = [_Item("t::fast"), _Item("t::g1", "g"), _Item("t::slow"), _Item("t::g2", "g")]
    _longest_first(items)
    assert [i.nodeid for i in items] == ["t::slow", "t::g1", "t::g2", "t::fast"]
