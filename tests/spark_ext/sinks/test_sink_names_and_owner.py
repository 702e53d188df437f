"""Derived names are injective over random ids; a sink's owner is its query's id (issue #24)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_ext.sinks.errors import SinkConfigError, SinkOwnerError
from spark_ext.sinks.names import derived_name, derived_prefix
from spark_ext.sinks.owner import OwnerDecision, SinkOwner, check_owner, owner_of_checkpoint

SINK_IDS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.]{0,12}", fullmatch=True)
TOPICS = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
SUFFIXES = st.sampled_from(["run", "s0", "s1", "s10", "t0", "catalog", "commit"])


@given(SINK_IDS, TOPICS, SUFFIXES, SINK_IDS, TOPICS, SUFFIXES)
def test_names_derived_from_different_parts_never_collide(s1, t1, x1, s2, t2, x2):
    a = derived_name("spark_ext", s1, t1, x1)
    b = derived_name("spark_ext", s2, t2, x2)
    assert (a == b) == ((s1, t1, x1) == (s2, t2, x2))


@given(SINK_IDS, SINK_IDS, SUFFIXES)
def test_a_prefix_scan_finds_one_sinks_names_and_no_others(s1, s2, suffix):
    name = derived_name("spark_ext.sink", s2, suffix)
    assert name.startswith(derived_prefix("spark_ext.sink", s1)) == (s1 == s2)


def test_the_dotted_ids_of_the_review_no_longer_collide():
    # N7: sink X's run group was sink X.run's progress group
    assert derived_name("spark_ext.sink", "X", "run") != derived_name("spark_ext.sink", "X.run")
    # N8: sink a.b -> topic c and sink a -> topic b.c shared a transactional id
    assert derived_name("spark_ext", "a.b", "c", "s0") != derived_name(
        "spark_ext", "a", "b.c", "s0"
    )


def test_a_part_holding_the_separator_is_refused():
    with pytest.raises(SinkConfigError):
        derived_name("spark_ext.sink", "a:b")


def test_another_owner_is_refused_naming_both():
    first, second = SinkOwner("query-x"), SinkOwner("query-y")
    with pytest.raises(SinkOwnerError) as e:
        check_owner("s5", "/tables/t", first.code, second, take_over=False, recorded_name="query-x")
    assert "query-x" in str(e.value) and "query-y" in str(e.value) and "\n" not in str(e.value)
    assert check_owner("s5", "/t", first.code, second, take_over=True) is OwnerDecision.TAKE_OVER
    assert check_owner("s5", "/t", second.code, second, take_over=False) is OwnerDecision.SAME
    assert check_owner("s5", "/t", None, second, take_over=False) is OwnerDecision.FIRST


def test_owner_codes_are_stable_63_bit_numbers():
    code = SinkOwner("bb347781-9b26-4093-aee3-509b8eb4e3f5").code
    assert 0 <= code < 2**63
    assert code == SinkOwner("bb347781-9b26-4093-aee3-509b8eb4e3f5").code
    assert code != SinkOwner("bb347781-9b26-4093-aee3-509b8eb4e3f6").code


def test_a_new_checkpoint_gets_spark_metadata_and_keeps_its_id(tmp_path):
    chk = tmp_path / "chk"
    owner = owner_of_checkpoint(chk)
    assert json.loads((chk / "metadata").read_text()) == {"id": owner.query_id}
    assert owner_of_checkpoint(chk) == owner
    assert owner_of_checkpoint(f"file:{chk}") == owner


def test_an_existing_spark_checkpoint_gives_its_query_id(tmp_path):
    (tmp_path / "metadata").write_text('{"id":"bb347781-9b26-4093-aee3-509b8eb4e3f5"}\n')
    assert owner_of_checkpoint(tmp_path).query_id == "bb347781-9b26-4093-aee3-509b8eb4e3f5"
    (tmp_path / "metadata").write_text("not json")
    with pytest.raises(SinkConfigError):
        owner_of_checkpoint(tmp_path)
