"""The price tables `telemetry cost` reads: one JSON file per region under price_tables/, each
price with the public page it was read from and the date it was read, and the AWS Price List Query
API request that refreshes it (`--live`).

The Price List Query API (boto3 `pricing`, served from us-east-1) answers GetProducts with a list of
JSON documents, one per product, whose `terms.OnDemand.<offer>.priceDimensions.<rate>.pricePerUnit.USD`
is the price (AWS Billing and Cost Management User Guide, "Using the AWS Price List Query API").
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from telemetry.shared.errors import UsageError

TABLES = Path(__file__).resolve().parent / "price_tables"
STALE_AFTER_DAYS = 90
PRICE_LIST_REGION = "us-east-1"  # one of the Query API's endpoints


@dataclass
class PriceTable:
    region: str
    as_of: datetime.date
    prices: dict[str, dict[str, Any]]
    checked: bool = True  # the table's prices were read from their pages (a price's own "checked" wins)
    refreshed: list[str] = field(default_factory=list)  # keys --live replaced
    kept: list[str] = field(default_factory=list)  # keys --live could not refresh, with why

    def usd(self, key: str) -> float:
        return float(self._price(key)["usd"])

    def unit(self, key: str) -> str:
        return self._price(key)["unit"]

    def source(self, key: str) -> str:
        price = self._price(key)
        read = "Price List API, " + price["read"] if key in self.refreshed else price["read"]
        return f"{price['source']} ({read})"

    def tiers(self, key: str) -> list[tuple[float | None, float]]:
        """[(upper bound in the price's unit or None, usd per unit)], in order."""
        return [(tier["up_to_million"], float(tier["usd"])) for tier in self._price(key)["tiers"]]

    def _price(self, key: str) -> dict[str, Any]:
        try:
            return self.prices[key]
        except KeyError:
            raise KeyError(f"the {self.region} price table has no price {key!r}") from None

    def age_days(self, today: datetime.date) -> int:
        return (today - self.as_of).days

    def unchecked(self) -> list[str]:
        """Prices neither read from their pages nor from the Price List (here or by a saved --live)."""
        return sorted(
            key for key, price in self.prices.items()
            if not price.get("checked", self.checked) and key not in self.refreshed
        )  # fmt: skip

    def staleness_warning(self, today: datetime.date) -> str | None:
        unchecked = self.unchecked()
        if unchecked:
            what = (
                "the prices " + ", ".join(unchecked) if len(unchecked) <= 5
                else f"{len(unchecked)} of the {len(self.prices)} prices"
            )  # fmt: skip
            return (
                f"warning: {what} in the {self.region} price table were not checked against their pages (see its "
                "checked_note); --live --save-prices takes what the AWS Price List has, the rest are read by hand"
            )
        age = self.age_days(today)
        if age <= STALE_AFTER_DAYS:
            return None
        return (
            f"warning: the {self.region} price table is {age} days old (as of {self.as_of}); refresh it with "
            "--live, or read the pages it names"
        )


def supported_regions() -> list[str]:
    return sorted(path.stem for path in TABLES.glob("*.json"))


def save(table: PriceTable, path: Path | None = None) -> Path:
    """Writes what --live refreshed into the region's table file: each refreshed price with its
    new value, the day it was read and checked; the table's date becomes that day."""
    path = path or TABLES / f"{table.region}.json"
    body = json.loads(path.read_text())
    for key in table.refreshed:
        body["prices"][key].update(usd=table.prices[key]["usd"], read=table.as_of.isoformat(), checked=True)
    if table.refreshed:
        body["as_of"] = table.as_of.isoformat()
    path.write_text(json.dumps(body, indent=1) + "\n")
    return path


def load(region: str) -> PriceTable:
    path = TABLES / f"{region}.json"
    if not path.exists():
        raise UsageError(
            f"no price table for region {region}; tables exist for {', '.join(supported_regions())} "
            f"(add telemetry/shared/price_tables/{region}.json, or run with --live)"
        )
    body = json.loads(path.read_text())
    return PriceTable(body["region"], datetime.date.fromisoformat(body["as_of"]), body["prices"],
                      checked=body.get("checked", True))


def refresh(table: PriceTable, pricing: Any, today: datetime.date) -> PriceTable:
    """Each price that names a Price List query is replaced by what the API answers, when it answers
    exactly one product with one USD price; otherwise the table's price is kept and the reason noted."""
    prices = {key: dict(price) for key, price in table.prices.items()}
    live = PriceTable(table.region, today, prices, checked=table.checked)
    for key, price in sorted(prices.items()):
        query = price.get("query")
        if not query:
            live.kept.append(f"{key}: refreshed by hand (no Price List query)")
            continue
        found = _query(pricing, table.region, query)
        if isinstance(found, str):
            live.kept.append(f"{key}: {found}")
            continue
        price.update(usd=found, read=today.isoformat())
        live.refreshed.append(key)
    return live


def _query(pricing: Any, region: str, query: dict[str, Any]) -> float | str:
    filters = [{"Type": "TERM_MATCH", "Field": "regionCode", "Value": region}] + [
        {"Type": "TERM_MATCH", "Field": name, "Value": value} for name, value in sorted(query["filters"].items())
    ]
    documents: list[str] = []
    token = None
    while True:
        request = {"ServiceCode": query["service"], "Filters": filters, "FormatVersion": "aws_v1", "MaxResults": 100}
        if token:
            request["NextToken"] = token
        answer = pricing.get_products(**request)
        documents += answer.get("PriceList", [])
        token = answer.get("NextToken")
        if not token:
            break
    if len(documents) != 1:
        return f"the Price List answered {len(documents)} products, not one"
    usd = [
        float(dimension["pricePerUnit"]["USD"])
        for term in json.loads(documents[0]).get("terms", {}).get("OnDemand", {}).values()
        for dimension in term["priceDimensions"].values()
        if "USD" in dimension.get("pricePerUnit", {})
    ]
    nonzero = [value for value in usd if value > 0]
    if len(nonzero) != 1:
        return f"the product has {len(nonzero)} non-zero USD prices (tiered), not one"
    return nonzero[0]
