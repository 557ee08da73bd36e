"""Counters left out while they stand still (collectors/quiet.py): a comeback shown at the value it
stood at for as long as the slowest scraper's gap, so every scraper of the agent counts the growth."""

from __future__ import annotations

from collectors.quiet import FORGET_GAPS, MAX_HOLD_SECONDS, MAX_SCRAPERS, QuietSeries, ScrapeCadence


class Clock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _scrapes(scrapers: dict[str, tuple[float, float]], until: float) -> list[tuple[float, str]]:
    """(time, scraper) of every scrape up to `until`: each scraper from its phase every its interval."""
    return sorted((phase + k * every, name) for name, (phase, every) in scrapers.items()
                  for k in range(int((until - phase) // every) + 1))


def _run(scrapers: dict[str, tuple[float, float]], moves: dict[float, float], until: float, idle: float = 60.0
         ) -> dict[str, list[tuple[float, float | None]]]:
    """Each scraper's (time, value shown or None for left out) of one counter that stands at 5 from
    the start and moves to the value of `moves` from each of its times on; one collection per scrape."""
    clock = Clock()
    cadence = ScrapeCadence(clock)
    quiet = QuietSeries(idle, cadence)
    seen: dict[str, list[tuple[float, float | None]]] = {name: [] for name in scrapers}
    value = 5.0
    for t, name in _scrapes(scrapers, until):
        clock.t = t
        value = max((v for at, v in moves.items() if at <= t), default=value)
        cadence.scraped(name)
        shown, _ = quiet.shown([("c", value)], t)
        seen[name].append((t, shown[0][1] if shown else None))
    return seen


def _after_gap(points: list[tuple[float, float | None]]) -> list[float]:
    """The values a scraper stored from the counter's comeback on (after its series went stale)."""
    back = next(i for i in range(1, len(points)) if points[i][1] is not None and points[i - 1][1] is None)
    return [v for _, v in points[back:] if v is not None]


def test_an_ha_pair_both_scrape_the_value_it_stood_at():
    """Two scrapers 15 s apart in phase 7 s: the one after the collection that finds the move scrapes
    the stood-at value too (with one scrape shown, only the first did: its pair saw the counter
    appear at 9 and counted no growth); each then its own value."""
    seen = _run({"a": (0.0, 15.0), "b": (7.0, 15.0)}, {200.0: 9.0}, 300.0)
    for name in "ab":
        back = _after_gap(seen[name])
        assert back[0] == 5.0 and set(back[1:]) == {9.0}, (name, back)


def test_a_single_scraper_sees_the_stood_at_value_once():
    seen = _run({"a": (0.0, 15.0)}, {200.0: 9.0}, 300.0)
    back = _after_gap(seen["a"])
    assert back[0] == 5.0 and set(back[1:]) == {9.0} and len(back) > 3


def test_the_slowest_scraper_sets_the_hold():
    """A 15 s and a 60 s scraper: the slow one's next scrape after the comeback still finds the
    stood-at value, and the fast one scrapes it for up to 60 s (the growth that much later)."""
    seen = _run({"fast": (0.0, 15.0), "slow": (5.0, 60.0)}, {246.0: 9.0}, 500.0, idle=120.0)
    slow, fast = _after_gap(seen["slow"]), _after_gap(seen["fast"])
    assert slow[0] == 5.0 and slow[1] == 9.0
    assert fast[0] == 5.0 and 2 <= fast.count(5.0) <= 4 and fast[fast.count(5.0):] == [9.0] * (len(fast) - fast.count(5.0))


def test_a_move_during_the_hold_stays_at_the_stood_at_value_until_it_ends():
    seen = _run({"a": (0.0, 15.0), "b": (7.0, 15.0)}, {200.0: 9.0, 206.0: 11.0}, 300.0)
    for name in "ab":
        back = _after_gap(seen[name])
        assert back[0] == 5.0 and set(back[1:]) == {11.0}, (name, back)


def test_without_a_cadence_a_comeback_is_shown_for_one_collection():
    quiet = QuietSeries(10.0)
    assert quiet.shown([("c", 1.0)], 0.0) == ([("c", 1.0)], 0)
    assert quiet.shown([("c", 1.0)], 20.0) == ([], 1)
    assert quiet.shown([("c", 2.0)], 21.0) == ([("c", 1.0)], 0)
    assert quiet.shown([("c", 2.0)], 21.5) == ([("c", 2.0)], 0)


def test_cadence_follows_each_connection_and_forgets_those_gone():
    clock = Clock(100.0)
    cadence = ScrapeCadence(clock)
    assert cadence.hold() == 0.0
    cadence.scraped("10.0.0.1:4000")
    assert cadence.hold() == 0.0  # one scrape: no gap yet
    for t, who in ((107.0, "10.0.0.2:5000"), (115.0, "10.0.0.1:4000"), (122.0, "10.0.0.2:5000")):
        clock.t = t
        cadence.scraped(who)
    assert cadence.hold() == 15.0
    clock.t = 122.0 + FORGET_GAPS * 15.0 + 1.0  # both stopped scraping
    assert cadence.hold() == 0.0
    clock.t += MAX_HOLD_SECONDS
    cadence.scraped("10.0.0.1:4000")  # back after a pause longer than MAX_HOLD_SECONDS: its gap before it
    assert cadence.hold() == 15.0
    slow = ScrapeCadence(clock)
    for _ in range(3):  # a scraper slower than MAX_HOLD_SECONDS sets no hold
        clock.t += MAX_HOLD_SECONDS + 1.0
        slow.scraped("10.0.0.3:6000")
    assert slow.hold() == 0.0


def test_cadence_follows_a_bounded_number_of_connections():
    """A client opening connection after connection (each its own scraper) keeps the table bounded;
    the scrapers followed longest ago go first."""
    clock = Clock(0.0)
    cadence = ScrapeCadence(clock)
    cadence.scraped("prometheus:1")
    clock.t = 15.0
    cadence.scraped("prometheus:1")
    for i in range(10 * MAX_SCRAPERS):
        clock.t = 15.0 + i * 0.001
        cadence.scraped(f"hostile:{i}")
        cadence.scraped(f"hostile:{i}")
    assert len(cadence._last) == MAX_SCRAPERS
    assert "prometheus:1" not in cadence._last
