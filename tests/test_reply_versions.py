"""The versions /retry and /edit replaced, as the session file keeps them."""

from nexus.versions import META_KEY, ReplyVersions, Version
from trace_core import VectorDatabase


def test_versions_round_trip_and_step_back(tmp_path):
    db = VectorDatabase(str(tmp_path / "s.db"))
    v = ReplyVersions()
    v.replacing(3, Version([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a1"}], "t1"))
    v.added(Version([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a2"}], "t2"))
    v.save(db)
    back = ReplyVersions.load(db)
    assert back == v and back.at == 1 and len(back.of(3)) == 2 and back.of(4) == []
    assert back.previous() == 0
    back.at = 0
    assert back.previous() == 1  # from the first, round to the newest
    # a replace of another exchange starts its own versions
    back.replacing(4, Version([], "t3"))
    assert back.exchange == 4 and len(back.versions) == 1
    db.close()


def test_an_unreadable_row_is_no_versions(tmp_path):
    db = VectorDatabase(str(tmp_path / "s.db"))
    for raw in ("not json", "[1, 2]", '{"exchange": 1, "versions": [], "at": 0}',
                '{"exchange": 1, "versions": [{"messages": []}], "at": 0}'):
        db.set_meta(META_KEY, raw)
        assert ReplyVersions.load(db) == ReplyVersions()
    db.close()
