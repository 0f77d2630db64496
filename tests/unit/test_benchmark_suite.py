"""The suite brings each workload's own figures to its columns."""

from __future__ import annotations

from benchmarks.suite import COLUMNS, markdown, normalize, table


def test_w4_latency_and_w7_rows_and_w5_ratio_land_in_the_common_columns() -> None:
    w4 = normalize(
        {
            "workload": "W4 latency",
            "durability": "flush=interval, acks=all",
            "send_rate": 4999.6,
            "p50_ms": 0.4,
            "p99_ms": 1.2,
            "broker_us": 3.5,
            "verified": True,
        }
    )
    assert (w4["msg_per_s"], w4["p50_ms"], w4["p99_ms"], w4["broker_cpu_us_per_msg"]) == (
        5000,
        0.4,
        1.2,
        3.5,
    )
    w7 = normalize(
        {
            "workload": "W7 spark read+count",
            "rows_per_s": {"mq": 900_000, "memory-rows": 400_000},
            "mq_vs_memory_rows_pct": 225.0,
            "mq_vs_memory_arrow_pct": 56.0,
            "verified": True,
        }
    )
    assert w7["msg_per_s"] == 900_000
    assert "225.0 % of in-memory rows" in w7["durability"]
    ratio = normalize({"workload": "W5 ratio", "median": 0.62, "broker_log_problems": []})
    assert ratio["durability"] == "RF=3 acks=all / RF=1 = 62%"
    assert ratio["verified"] is True
    w5 = normalize(
        {
            "workload": "W5 produce",
            "setup": "RF=3 acks=all",
            "ack_p50_ms": 0.9,
            "ack_p99_ms": 2.0,
            "msg_per_s": 40_000,
            "verified": True,
        }
    )
    assert (w5["workload"], w5["p50_ms"]) == ("W5 produce RF=3 acks=all", 0.9)
    w2 = normalize({"workload": "W1 produce", "msg_per_s": 1}, "W2 produce 1 KiB")
    assert w2["workload"] == "W2 produce 1 KiB"
    many = normalize({"workload": "W1 produce send_many"}, "W2 produce 1 KiB")
    assert many["workload"] == "W2 produce 1 KiB send_many"
    assert all(set(row) == set(COLUMNS) for row in (w4, w7, ratio, w5, w2))


def test_the_table_and_the_markdown_show_every_row() -> None:
    rows = [
        normalize({"workload": "W1 produce", "msg_per_s": 123456, "verified": True}),
        normalize({"workload": "W6 receive+ack", "verified": False}),
    ]
    text = table(rows)
    assert "123,456" in text[1]
    assert text[1].endswith("yes")
    assert text[2].endswith("NO")
    md = markdown(rows, 3)
    assert "| W1 produce |" in md
    assert "medians of 3 runs" in md
