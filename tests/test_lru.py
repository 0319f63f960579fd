"""Tests for middleware.lru: the bounded per-process caches."""

from __future__ import annotations

from middleware.lru import Lru


def test_least_recently_used_goes_first() -> None:
    """Past its size the cache drops the entry used longest ago; a put refreshes an entry."""
    cache: Lru[int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)  # "a" is now the most recent
    cache.put("c", 4)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (3, None, 4)


def test_pop_returns_and_removes() -> None:
    cache: Lru[str] = Lru(4)
    cache.put("s", "prompt")
    assert cache.pop("s") == "prompt" and cache.pop("s") is None and cache.get("s") is None


def test_an_evicted_value_is_handed_to_the_callback() -> None:
    """What is pushed out is told (the proxy hook lets an evicted turn go); what is popped is not."""
    gone: list[int] = []
    lru: Lru[int] = Lru(2, evicted=gone.append)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        lru.put(key, value)
    lru.pop("b")
    lru.put("d", 4)
    assert gone == [1] and lru.get("c") == 3 and lru.get("d") == 4


def test_add_puts_a_value_only_where_the_key_holds_none_in_one_step() -> None:
    """``add`` is a check and a put that no other thread can come between: of many threads
    adding the same key, exactly one adds it; a key already held keeps its value."""
    import threading

    lru: Lru[int] = Lru(2)
    assert lru.add("a", 1) and not lru.add("a", 2) and lru.get("a") == 1
    lru.forget("a")
    assert lru.add("a", 3) and lru.get("a") == 3
    for n in range(5):  # past its size the oldest goes, as with put
        lru.add(f"k{n}", n)
    assert lru.get("a") is None and lru.get("k4") == 4
    shared: Lru[int] = Lru(10)
    added: list[bool] = []
    start = threading.Barrier(8)

    def race(n: int) -> None:
        start.wait()
        added.append(shared.add("same", n))

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert added.count(True) == 1


def test_swap_puts_a_value_and_gives_the_one_it_replaced_in_one_step() -> None:
    """``swap`` gives what the key held (None: nothing) and holds the new value: of many
    threads swapping the same value in, exactly one sees it missing; it refreshes the key."""
    import threading

    lru: Lru[int] = Lru(2)
    assert lru.swap("a", 1) is None and lru.swap("a", 2) == 1 and lru.get("a") == 2
    lru.put("b", 3)
    lru.swap("a", 4)  # "a" is now the most recent
    lru.put("c", 5)
    assert (lru.get("a"), lru.get("b")) == (4, None)
    shared: Lru[int] = Lru(10)
    before: list[int | None] = []
    start = threading.Barrier(8)

    def race() -> None:
        start.wait()
        before.append(shared.swap("same", 7))

    threads = [threading.Thread(target=race) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert before.count(None) == 1 and before.count(7) == 7
