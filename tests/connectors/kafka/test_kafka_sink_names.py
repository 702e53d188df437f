"""Every name a Kafka sink derives from its sink id and topic is injective (issue #24, N7, N8).

The names are taken from the objects the sinks use (settings, progress, committer, task
markers), not rebuilt here, so a sink that builds a name on its own is caught.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.kafka.commit import KafkaCommitter
from connectors.kafka.idempotent import TaskStarted
from connectors.kafka.progress import SinkProgress
from connectors.kafka.settings import KafkaSinkSettings

#: Dotted ids made of the words the sinks' names use as suffixes, so the collisions of the
#: review (``X`` and ``X.run``, ``a.b``/``c`` and ``a``/``b.c``) are drawn, not just hoped for.
WORDS = st.sampled_from(["a", "b", "X", "run", "s", "s0", "s1", "t0", "probe", "commit", "owner"])
DOTTED = st.lists(WORDS, min_size=1, max_size=3).map(".".join)
SINK_IDS = st.one_of(DOTTED, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.]{0,10}", fullmatch=True))
TOPICS = st.one_of(DOTTED, st.from_regex(r"[A-Za-z0-9._-]{1,10}", fullmatch=True))
SLICES = range(3)


def groups(sink_id: str, topic: str) -> dict[str, str]:
    """Every consumer group the sink with ``sink_id`` writing ``topic`` commits offsets to."""
    s = KafkaSinkSettings("127.0.0.1:9", topic, sink_id)
    committer = KafkaCommitter(s)
    found = {
        "progress": SinkProgress(s.bootstrap, topic, sink_id).group,
        "run": committer.run_group,
    }
    for i in SLICES:
        found[f"s{i}"] = s.names.slice_group(i)
        found[f"probe{i}"] = s.names.probe_group(i)
        found[f"t{i}"] = TaskStarted(s, i).group
    return found


def transactional_ids(sink_id: str, topic: str) -> dict[str, str]:
    s = KafkaSinkSettings("127.0.0.1:9", topic, sink_id)
    return {"commit": s.names.commit_id} | {f"s{i}": s.names.slice_id(i) for i in SLICES}


def test_the_review_collisions_are_gone():
    x = KafkaSinkSettings("127.0.0.1:9", "out", "X")
    # N7: sink X's run-epoch group was sink X.run's progress group
    assert KafkaCommitter(x).run_group != SinkProgress(x.bootstrap, "out", "X.run").group
    # N8: sink a.b -> topic c and sink a -> topic b.c shared their slice transactional ids
    ab_c = KafkaSinkSettings("127.0.0.1:9", "c", "a.b")
    a_bc = KafkaSinkSettings("127.0.0.1:9", "b.c", "a")
    assert ab_c.names.slice_id(0) != a_bc.names.slice_id(0)


@settings(max_examples=300)
@given(SINK_IDS, TOPICS, SINK_IDS, TOPICS)
def test_no_two_sinks_share_a_group_or_a_transactional_id(s1, t1, s2, t2):
    """Two different (sink, topic) pairs never share a name, nor one sink two of its names.

    Groups are keyed by sink id alone (one sink id writing two topics keeps its records on
    each topic's partitions of the same group), transactional ids by sink id and topic."""
    for names in (groups, transactional_ids):
        a, b = names(s1, t1), names(s2, t2)
        assert len(set(a.values())) == len(a)
        same = s1 == s2 if names is groups else (s1, t1) == (s2, t2)
        if not same:
            assert not set(a.values()) & set(b.values()), (a, b)


@settings(max_examples=300)
@given(SINK_IDS, TOPICS, SINK_IDS, TOPICS)
def test_a_sinks_scans_find_its_own_slices_and_nothing_else(s1, t1, s2, t2):
    """The start-up's ListGroups and ListTransactions scans: a name of another sink is never
    taken for one of this sink's slices, and this sink's slices are all found."""
    mine = KafkaSinkSettings("127.0.0.1:9", t1, s1).names
    for i in SLICES:
        assert mine.slice_of_group(groups(s1, t1)[f"s{i}"]) == i
        assert mine.slice_of_transactional_id(transactional_ids(s1, t1)[f"s{i}"]) == i
    for name in groups(s2, t2).values():
        assert mine.slice_of_group(name) is None or (s1 == s2 and name.count(":") == 2)
    for name in transactional_ids(s2, t2).values():
        found = mine.slice_of_transactional_id(name)
        assert found is None or ((s1, t1) == (s2, t2) and name.endswith(f"s{found}"))
