"""``--only KEY=V1,V2`` (:mod:`fedbench.only`): the grammar ``fedbench sweep`` and ``fedbench
compare`` share, on hand-made items."""

from __future__ import annotations

import pytest

from fedbench.errors import UserError
from fedbench.only import keep, parse, shown


def test_commas_inside_brackets_belong_to_a_list_value():
    key, wanted, field = parse("run.tier_fractions=[0.16,0.33,1.0], [0.5, 0.75, 1.0]")
    assert (key, field) == ("run.tier_fractions", True)
    # each value as typed and as shown() writes it (json.dumps: ", " between items)
    assert shown([0.16, 0.33, 1.0]) in wanted and shown([0.5, 0.75, 1.0]) in wanted
    assert wanted == {"[0.16,0.33,1.0]", "[0.16, 0.33, 1.0]", "[0.5, 0.75, 1.0]"}
    assert parse("setting=iid,10/1.0")[1] == {"iid", "10/1.0"}  # no JSON: kept as typed
    assert parse("run.lr=0.50")[1] == {"0.50", "0.5"}  # typed, and as a record's 0.5 shows


@pytest.mark.parametrize("item", ["run.tier_fractions=[0.1,0.2", "run.tier_fractions=0.1]", "run.x=[1]]"])
def test_unbalanced_brackets_are_refused(item):
    with pytest.raises(UserError, match="unbalanced brackets"):
        parse(item)


def _value(item: dict, key: str, field: bool) -> str | None:
    v = item.get(key)
    return None if v is None else shown(v)


ITEMS = [{"seed": 0, "run.tier_fractions": [0.5, 0.75, 1.0]}, {"seed": 1, "run.tier_fractions": [0.16, 0.33, 1.0]},
         {"seed": 2}]


def test_a_list_value_selects_the_items_that_have_it():
    assert keep(ITEMS, ["run.tier_fractions=[0.16,0.33,1.0]"], _value, "item") == [ITEMS[1]]
    assert keep(ITEMS, ["run.tier_fractions=[0.16,0.33,1.0],[0.5,0.75,1.0]"], _value, "item") == ITEMS[:2]
    assert keep(ITEMS, ["run.tier_fractions=[0.5,0.75,1.0]"], _value, "item", absent_passes=True) == [
        ITEMS[0], ITEMS[2]]


def test_a_filter_that_keeps_nothing_names_the_values_there_are():
    # typed without brackets, the list reads as three values: none matches, and the error shows the lists
    with pytest.raises(UserError, match=r"matches no item \(the 3 left have run.tier_fractions "
                                        r"\[0.16, 0.33, 1.0\]; \[0.5, 0.75, 1.0\]\)"):
        keep(ITEMS, ["run.tier_fractions=0.16,0.33,1.0"], _value, "item")
    with pytest.raises(UserError, match=r"--only 'seed=5' \(with the filters before it\) matches no item "
                                        r"\(the 1 left have seed 1\)"):
        keep(ITEMS, ["seed=1", "seed=5"], _value, "item")
    # numbers listed by value, not as text ("10" sorts before "2")
    with pytest.raises(UserError, match=r"the 3 left have seed 2; 9; 10\)"):
        keep([{"seed": 10}, {"seed": 2}, {"seed": 9}], ["seed=5"], _value, "item")


def test_a_value_nested_past_the_json_parser_is_kept_as_typed():
    deep = "[" * 100_000 + "]" * 100_000
    assert parse(f"run.x={deep}")[1] == {deep}
