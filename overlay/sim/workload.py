"""The workload every simulation and the main job share: the filters subscriptions draw
(empty ones included) and the events publishers make. One definition, so that a run in
the simulator and a run against real daemons ask the overlay the same questions."""

from __future__ import annotations

from random import Random
from typing import Any

#: Filters drawn for subscriptions: empty ones, equality, ranges, LIKE, IN, OR, NOT.
FILTER_MIX = [
    "",
    "",
    "price > 50",
    "sym = 'ACME'",
    "sym IN ('ACME', 'INIT') AND price < 80",
    "region LIKE 'eu-%'",
    "urgent = TRUE OR price >= 95",
    "NOT (region LIKE 'us-%') AND qty BETWEEN 10 AND 500",
]
SYMBOLS = ["ACME", "INIT", "GLOBEX", "UMBRELLA"]
REGIONS = ["eu-west", "eu-north", "us-east", "ap-south"]


def random_event(rng: Random) -> dict[str, Any]:
    """An event's attributes: a symbol, a price, a quantity, a region, an urgency."""
    return {"sym": rng.choice(SYMBOLS), "price": round(rng.uniform(0, 100), 2),
            "qty": rng.randrange(1, 1000), "region": rng.choice(REGIONS),
            "urgent": rng.random() < 0.1}
