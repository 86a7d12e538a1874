"""The fan-out's order of copies: one copy from the controller, then hosts serve hosts within their bound,
nearest first; a failed source is never used again and its target tries another; a target that cannot take
a copy is given up; the controller serves again only when no host can."""

from __future__ import annotations

from vllmctl.fanout.schedule import CONTROLLER, MAX_ATTEMPTS, Copy, Schedule, preview


def hosts(n: int) -> list[str]:
    return [f"h{i}" for i in range(1, n + 1)]


def test_without_a_holder_the_controller_pushes_one_host_and_waits_for_it() -> None:
    schedule = Schedule([], hosts(4))
    assert schedule.next_copies() == [Copy("h1", CONTROLLER)]
    assert schedule.next_copies() == []  # nobody else copies from the controller meanwhile
    schedule.finished(Copy("h1", CONTROLLER))
    assert schedule.next_copies() == [Copy("h2", "h1"), Copy("h3", "h1")]


def test_copies_grow_each_round_and_no_source_serves_more_than_its_bound() -> None:
    rounds = preview([], hosts(16), 2, {})
    assert [len(r) for r in rounds] == [1, 2, 6, 7]  # 1 -> 3 -> 9 -> 16 copies
    for copies in rounds:
        sources = [c.source for c in copies]
        assert all(sources.count(s) <= 2 for s in sources)
    assert sorted(c.target for r in rounds for c in r) == sorted(hosts(16))
    assert sum(c.source == CONTROLLER for r in rounds for c in r) == 1


def test_a_holder_serves_targets_with_its_own_label_first() -> None:
    labels = {"a1": "rack-a", "b1": "rack-b", "a2": "rack-a", "b2": "rack-b", "b3": "rack-b"}
    schedule = Schedule(["a1"], ["b1", "b2", "a2"], 1, labels)
    assert schedule.next_copies() == [Copy("a2", "a1")]


def test_a_failed_source_is_not_used_again_and_its_target_tries_another() -> None:
    schedule = Schedule(["h1", "h2"], ["h3"], 1)
    (first,) = schedule.next_copies()
    schedule.source_failed(first, "connection lost")
    (second,) = schedule.next_copies()
    assert second.target == "h3" and second.source != first.source
    schedule.finished(second)
    schedule.pending.append("h4")
    assert all(c.source != first.source for c in schedule.next_copies())


def test_with_no_host_left_to_try_the_controller_serves_the_target() -> None:
    schedule = Schedule(["h1"], ["h2"], 2)
    schedule.source_failed(schedule.next_copies()[0], "sha256 mismatch")
    assert schedule.next_copies() == [Copy("h2", CONTROLLER)]
    schedule.source_failed(Copy("h2", CONTROLLER), "connection lost")
    assert schedule.failed == {"h2": "connection lost"} and schedule.done  # its own run pushes again


def test_a_target_is_given_up_after_max_attempts_or_its_own_fault() -> None:
    schedule = Schedule([f"s{i}" for i in range(MAX_ATTEMPTS + 1)], ["t"], 1)
    for _ in range(MAX_ATTEMPTS):
        (copy,) = schedule.next_copies()
        schedule.source_failed(copy, "died")
    assert schedule.failed == {"t": "died"} and schedule.next_copies() == [] and schedule.done
    disk = Schedule(["s"], ["t"], 1)
    disk.target_failed(disk.next_copies()[0], "disk full")
    assert disk.failed == {"t": "disk full"} and disk.next_copies() == [] and disk.done


def test_a_corrupt_holder_becomes_a_target_of_another_host_never_of_itself() -> None:
    schedule = Schedule(["h1", "h2"], [], 1)
    schedule.requeue("h1")
    assert schedule.next_copies() == [Copy("h1", "h2")]


def test_a_corrupt_holder_found_by_several_copies_is_copied_to_once() -> None:
    schedule = Schedule(["a"], ["b", "c"], 2)
    for copy in schedule.next_copies():
        schedule.source_failed(copy, "corrupt")
        schedule.requeue("a")
    assert schedule.pending.count("a") == 1
    (seed,) = schedule.next_copies()
    schedule.finished(seed)
    started = schedule.next_copies()
    assert [c.target for c in started].count("a") == 1
    schedule.requeue("a")  # while its copy is under way: nothing more
    assert "a" not in schedule.pending


def test_nothing_to_copy_is_done_at_once() -> None:
    assert Schedule(["h1"], []).done and preview(["h1"], [], 2, {}) == []
