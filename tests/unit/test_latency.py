"""LATENCY DOCTOR and GRAPH, byte for byte as C Disque 1.0-rc1 printed them for the same
samples (recorded with DEBUG SLEEP on the C binary, issue #29)."""

from __future__ import annotations

from disquepy.core.latency import LatencyMonitor, doctor, graph

T0 = 1795856076


def monitor(samples: list[tuple[int, int]]) -> LatencyMonitor:
    m = LatencyMonitor()
    for t, ms in samples:
        m.add("command", ms, (T0 + t) * 1000)
    return m


THREE = [(0, 50), (1, 120), (2, 30)]


def test_graph_of_three_samples():
    assert graph(monitor(THREE), "command", (T0 + 31) * 1000) == (
        "command - high 120 ms, low 30 ms (all time high 120 ms)\n" + "-" * 80 + "\n"
        " # \n | \n | \n#|_\n   \n332\n109\nsss\n")
    assert graph(monitor(THREE[:1]), "command", T0 * 1000) == (
        "command - high 50 ms, low 50 ms (all time high 50 ms)\n" + "-" * 80 + "\n"
        " \n \n \n_\n \n0\ns\n")
    assert graph(monitor(THREE), "other", T0 * 1000) is None


# 85 samples, one a second with gaps, 10 to 90 ms: two bands of bars, ages in minutes
EIGHTY_FIVE = [
    (0, 23), (1, 30), (2, 40), (3, 50), (4, 60), (5, 70), (7, 80), (8, 90), (9, 10), (10, 20),
    (11, 30), (12, 40), (13, 50), (14, 71), (15, 70), (16, 80), (17, 90), (19, 10), (20, 20),
    (21, 30), (22, 40), (23, 50), (24, 60), (25, 70), (26, 80), (27, 90), (28, 12), (29, 20),
    (30, 30), (31, 40), (32, 50), (34, 60), (35, 70), (36, 80), (37, 90), (38, 10), (39, 21),
    (40, 30), (41, 40), (42, 50), (43, 60), (44, 70), (46, 80), (47, 90), (48, 11), (49, 20),
    (50, 31), (51, 40), (52, 50), (53, 60), (54, 70), (55, 80), (56, 90), (58, 10), (59, 20),
    (60, 30), (61, 40), (62, 50), (63, 60), (64, 70), (65, 80), (66, 90), (67, 10), (68, 20),
    (70, 30), (71, 40), (72, 50), (73, 60), (74, 70), (75, 80), (76, 90), (77, 10), (78, 20),
    (79, 30), (80, 40), (81, 50), (83, 60), (84, 70), (85, 80), (86, 90), (87, 10), (88, 20),
    (89, 30), (90, 40), (91, 50)]


def test_graph_of_two_bands():
    band = ("     _o#     __o#      _o#      _o#      _o#      _o#      _o#      _o#      _o#\n"
            "   _o|||    _||||    _o|||    _o|||    _o|||    _o|||    _o|||    _o|||    _o|||\n"
            " _o|||||  _o|||||  _o|||||  _o|||||  _o|||||  _o|||||  _o|||||  _o|||||  _o|||||\n"
            "o|||||||_o|||||||_o|||||||_o|||||||_o|||||||_o|||||||_o|||||||_o|||||||_o|||||||\n")
    assert graph(monitor(EIGHTY_FIVE), "command", (T0 + 2469) * 1000) == (
        "command - high 90 ms, low 10 ms (all time high 90 ms)\n" + "-" * 80 + "\n" + band
        + " " * 80 + "\n" + "4" * 64 + "3" * 16 + "\n" + "1" * 9 + "0" * 55 + "9" * 16 + "\n"
        + "m" * 80 + "\n\n     \n    _\n  _o|\n_o|||\n     \n33333\n99999\nmmmmm\n")


ADVICE = (
    "- Check your Slow Log to understand what are the commands you are running which are "
    "too slow to execute. Please check http://disque.io/commands/slowlog for more "
    "information.\n- Deleting, expiring or evicting (because of maxmemory policy) large "
    "objects is a blocking operation. If you have very large objects that are often "
    "deleted, expired, or evicted, try to fragment those objects into multiple smaller "
    "objects.\n")
SPIKES = ("Dave, I have observed latency spikes in this Disque instance. You don't mind "
          "talking about it, do you Dave?\n\n")


def test_doctor():
    assert doctor(LatencyMonitor(), 0, 10000, T0 * 1000).startswith(
        "I'm sorry, Dave, I can't do that. Latency monitoring is disabled")
    assert doctor(LatencyMonitor(), 10, 10000, T0 * 1000).startswith(
        "Dave, no latency spike was observed")
    # the period: seconds since the first sample (1 if none), per sample
    assert doctor(monitor(THREE[:1]), 10, 10000, T0 * 1000) == (
        SPIKES + "1. command: 1 latency spikes (average 50ms, mean deviation 0ms, period "
        "1.00 sec). Worst all time event 50ms.\n\nI have a few advices for you:\n\n" + ADVICE)
    assert doctor(monitor(THREE), 1, 10000, (T0 + 31) * 1000) == (
        SPIKES + "1. command: 3 latency spikes (average 66ms, mean deviation 35ms, period "
        "10.33 sec). Worst all time event 120ms.\n\nI have a few advices for you:\n\n- Your "
        "current Slow Log configuration only logs events that are slower than your "
        "configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than "
        "1000'.\n" + ADVICE)
    assert doctor(monitor(EIGHTY_FIVE), 5, 3000, (T0 + 2466) * 1000) == (
        SPIKES + "1. command: 85 latency spikes (average 49ms, mean deviation 22ms, period "
        "29.01 sec). Worst all time event 90ms.\n\nI have a few advices for you:\n\n" + ADVICE)
