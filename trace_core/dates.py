"""Dates named in a question ("on October 13, 2023", "in June", "in 2022"), for retrieval.

Every exchange carries the date it was said; a question that names a date most likely
asks about what was said then. Only explicit calendar dates are read: relative ones
("last week") depend on when the question is asked and are left to the model.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m and m.lower() != "may"})
# a month name is a whole word or takes its dot: "of Maria's" names no March
_M = "(" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")(?:\.|\b)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"


@dataclass(frozen=True)
class DateSpec:
    """A day, a month (of a year, or of any year) or a year; ``None`` parts match anything."""

    year: int | None = None
    month: int | None = None
    day: int | None = None

    def matches(self, timestamp: str) -> bool:
        """Whether an ISO timestamp ("2023-10-13T…") falls on this date."""
        try:
            y, m, d = int(timestamp[:4]), int(timestamp[5:7]), int(timestamp[8:10])
        except (ValueError, IndexError):
            return False
        return ((self.year is None or y == self.year) and (self.month is None or m == self.month)
                and (self.day is None or d == self.day))


def _month(name: str) -> int:
    return _MONTHS[name.lower().rstrip(".")]


# most specific first: the first form that matches anything wins
_FORMS = [
    (re.compile(rf"\b{_M}\s+{_DAY},?\s+{_YEAR}\b", re.I),  # October 13, 2023
     lambda m: DateSpec(int(m[3]), _month(m[1]), int(m[2]))),
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_M},?\s+{_YEAR}\b", re.I),  # 13 October 2023
     lambda m: DateSpec(int(m[3]), _month(m[2]), int(m[1]))),
    (re.compile(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)\b"),  # 2023-10-13
     lambda m: DateSpec(int(m[1]), int(m[2]), int(m[3]))),
    (re.compile(rf"\b{_M},?\s+{_YEAR}\b", re.I),  # October 2023
     lambda m: DateSpec(int(m[2]), _month(m[1]), None)),
    # a day without its year, of any year ("on November 8th" found nothing of that day, and
    # "the 8th of November" read as the whole month: a trial)
    (re.compile(rf"\b(?:{_M}\s+{_DAY}\b(?!:)|{_DAY}\s+(?:of\s+)?{_M})", re.I),  # November 8th, 8th of November
     lambda m: DateSpec(None, _month(m[4]), int(m[3])) if m[3]
     else DateSpec(None, _month(m[1] if m[1] != "may" else "?"), int(m[2]))),  # "I may 3 times": no date
    (re.compile(rf"\b(?:in|during|since|of|on)\s+{_M}(?!\s+\d)", re.I),  # in June (a preposition first: "may" is also a verb)
     lambda m: DateSpec(None, _month(m[1]), None)),
    (re.compile(rf"\b(?:in|during|of)\s+{_YEAR}\b", re.I),  # in 2022
     lambda m: DateSpec(int(m[1]), None, None)),
]


def dates_in(question: str) -> list[DateSpec]:
    """The calendar dates a question names, most specific form only."""
    for pattern, make in _FORMS:
        found = []
        for m in pattern.finditer(question):
            try:
                spec = make(m)
            except (KeyError, ValueError):
                continue
            if spec.month is not None and not 1 <= spec.month <= 12:
                continue
            if spec.day is not None and not 1 <= spec.day <= 31:
                continue
            found.append(spec)
        if found:
            return list(dict.fromkeys(found))
    return []
