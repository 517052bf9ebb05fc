"""Time expressions in a query ("上个月", "last week", "in May", "昨天") as an event-time window.

`parse_window(query, now)` returns the window `[start, end)` (unix seconds, UTC calendar) the first
time expression of the query names, relative to `now`, or None. Recall applies it like
`event_from` / `event_until` when the caller gave no window itself, and reports it on each result
(`ScoredMemory.time_window`); when nothing lies inside the window, recall falls back to no window.

Explicit patterns, not a general date parser: they cover the forms people use when asking about
their past (relative days, weeks, months, years; named months with or without a year; "N days ago";
Chinese and English) and cost microseconds, where `dateparser.search.search_dates` costs tens of
milliseconds per query — more than the whole recall budget. Weeks start on Monday. Calendar days are
UTC days (a memory service does not know the asker's time zone unless told).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from usermem.model import EventWindow

_DAY = 86400.0


TimeWindow = EventWindow  # `[start, end)` in unix seconds and the words that named it (usermem.model)


_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
              "九": 9, "十": 10}
_EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
               "eight": 8, "nine": 9, "ten": 10, "couple of": 2, "few": 3}
_MONTHS = {m: i + 1 for i, m in enumerate(("january", "february", "march", "april", "may", "june", "july",
                                            "august", "september", "october", "november", "december"))}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9


def _zh_number(text: str) -> int | None:
    if text.isdigit():
        return int(text)
    if not text or any(ch not in _ZH_DIGITS for ch in text):
        return None
    if text == "十":
        return 10
    if "十" in text:  # 十二, 二十, 二十三
        tens, _, ones = text.partition("十")
        return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[ones] if ones else 0)
    value = 0
    for ch in text:
        value = value * 10 + _ZH_DIGITS[ch]
    return value


def _midnight(d: datetime) -> datetime:
    return d.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_start(year: int, month: int) -> datetime:
    while month < 1:
        year, month = year - 1, month + 12
    while month > 12:
        year, month = year + 1, month - 12
    return datetime(year, month, 1, tzinfo=UTC)


def _window(start: datetime, end: datetime, expression: str) -> TimeWindow:
    return TimeWindow(start.timestamp(), end.timestamp(), expression)


def _days(now: datetime, back: int, expression: str) -> TimeWindow:
    day = _midnight(now) - timedelta(days=back)
    return _window(day, day + timedelta(days=1), expression)


def _week(now: datetime, back: int, expression: str) -> TimeWindow:
    monday = _midnight(now) - timedelta(days=now.weekday()) - timedelta(weeks=back)
    return _window(monday, monday + timedelta(weeks=1), expression)


def _month(now: datetime, back: int, expression: str) -> TimeWindow:
    start = _month_start(now.year, now.month - back)
    return _window(start, _month_start(start.year, start.month + 1), expression)


def _year(year: int, expression: str) -> TimeWindow:
    return _window(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC), expression)


def _named_month(now: datetime, month: int, year: int | None, expression: str) -> TimeWindow | None:
    if not 1 <= month <= 12:
        return None
    if year is None:  # the latest such month that has begun
        year = now.year if month <= now.month else now.year - 1
    start = _month_start(year, month)
    return _window(start, _month_start(year, month + 1), expression)


def _ago(now: datetime, n: int, unit: str, expression: str) -> TimeWindow:
    """'3 days ago' = that day; '2 weeks ago' = that week; '2 months ago' = that month; years likewise."""
    if unit == "day":
        return _days(now, n, expression)
    if unit == "week":
        return _week(now, n, expression)
    if unit == "month":
        return _month(now, n, expression)
    return _year(now.year - n, expression)


_ZH_NUM = r"[0-9零〇一二两三四五六七八九十]+"
_ZH_FIXED: tuple[tuple[re.Pattern[str], str, int], ...] = tuple(
    (re.compile(p), unit, back) for p, unit, back in (
        (r"大前天", "day", 3), (r"前天", "day", 2), (r"昨天|昨日|昨晚|昨儿", "day", 1), (r"今天|今日|今晚|今早", "day", 0),
        (r"上上(?:个)?(?:周|星期|礼拜)", "week", 2), (r"上(?:个)?(?:周|星期|礼拜)", "week", 1),
        (r"(?:这|本)(?:个)?(?:周|星期|礼拜)", "week", 0),
        (r"上上个月", "month", 2), (r"上(?:个)?月", "month", 1), (r"(?:这|本)(?:个)?月", "month", 0),
        (r"前年", "year", 2), (r"去年", "year", 1), (r"今年", "year", 0),
    ))
_ZH_AGO = re.compile(rf"({_ZH_NUM})(天|日|周|个星期|个礼拜|星期|个月|年)(?:之|以)?前")
_ZH_MONTH = re.compile(rf"(?:(\d{{4}})年)?({_ZH_NUM})月(?:份)?(?:(\d{{1,2}}|[一二三四五六七八九十]+)[日号])?")
_ZH_YEAR = re.compile(r"(\d{4})年")

_EN_FIXED: tuple[tuple[re.Pattern[str], str, int], ...] = tuple(
    (re.compile(p), unit, back) for p, unit, back in (
        (r"\bthe day before yesterday\b", "day", 2), (r"\byesterday\b", "day", 1),
        (r"\b(?:today|tonight|this morning)\b", "day", 0),
        (r"\blast week\b", "week", 1), (r"\bthis week\b", "week", 0),
        (r"\blast month\b", "month", 1), (r"\bthis month\b", "month", 0),
        (r"\blast year\b", "year", 1), (r"\bthis year\b", "year", 0),
    ))
_EN_AGO = re.compile(r"\b(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few)\s+"
                     r"(day|week|month|year)s?\s+ago\b")
_EN_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))
_EN_MONTH = re.compile(rf"\b(?:in|during|on|since|of|from)\s+(?:(\d{{1,2}})(?:st|nd|rd|th)?\s+)?({_EN_MONTH_NAMES})\b\.?"
                       rf"(?:\s+(\d{{1,2}})(?:st|nd|rd|th)?\b)?(?:,?\s+(\d{{4}})\b)?"
                       rf"|\b({_EN_MONTH_NAMES})\.?\s+(\d{{4}})\b")
_EN_YEAR = re.compile(r"\b(?:in|during|of)\s+((?:19|20)\d{2})\b")


def _fixed(now: datetime, unit: str, back: int, expression: str) -> TimeWindow:
    if unit == "day":
        return _days(now, back, expression)
    if unit == "week":
        return _week(now, back, expression)
    if unit == "month":
        return _month(now, back, expression)
    return _year(now.year - back, expression)


def _day_of(year: int, month: int, day: int, expression: str) -> TimeWindow | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return _window(start, start + timedelta(days=1), expression)


def _parse_zh(text: str, now: datetime) -> TimeWindow | None:
    for pattern, unit, back in _ZH_FIXED:
        m = pattern.search(text)
        if m:
            return _fixed(now, unit, back, m.group(0))
    m = _ZH_AGO.search(text)
    if m:
        n = _zh_number(m.group(1))
        unit = {"天": "day", "日": "day", "年": "year", "个月": "month"}.get(m.group(2), "week")
        if n is not None:
            return _ago(now, n, unit, m.group(0))
    m = _ZH_MONTH.search(text)
    if m:
        month = _zh_number(m.group(2))
        year = int(m.group(1)) if m.group(1) else None
        if month is not None and 1 <= month <= 12:
            if m.group(3):
                day = _zh_number(m.group(3))
                y = year if year is not None else (now.year if month <= now.month else now.year - 1)
                if day is not None:
                    return _day_of(y, month, day, m.group(0))
            return _named_month(now, month, year, m.group(0))
    m = _ZH_YEAR.search(text)
    if m:
        return _year(int(m.group(1)), m.group(0))
    return None


def _parse_en(text: str, now: datetime) -> TimeWindow | None:
    for pattern, unit, back in _EN_FIXED:
        m = pattern.search(text)
        if m:
            return _fixed(now, unit, back, m.group(0))
    m = _EN_AGO.search(text)
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else _EN_NUMBERS[m.group(1)]
        return _ago(now, n, m.group(2), m.group(0))
    m = _EN_MONTH.search(text)
    if m:
        if m.group(5):  # "May 2023"
            return _named_month(now, _MONTHS[m.group(5)], int(m.group(6)), m.group(0))
        # "may" alone is also a verb: a bare month needs its preposition (the pattern has it)
        month = _MONTHS[m.group(2)]
        year = int(m.group(4)) if m.group(4) else None
        day_text = m.group(1) or m.group(3)
        if day_text:
            y = year if year is not None else (now.year if month <= now.month else now.year - 1)
            return _day_of(y, month, int(day_text), m.group(0))
        return _named_month(now, month, year, m.group(0))
    m = _EN_YEAR.search(text)
    if m:
        return _year(int(m.group(1)), m.group(0))
    return None


def parse_window(query: str, now: float) -> TimeWindow | None:
    """The event-time window the query's time expression names, relative to `now`, or None."""
    if not query:
        return None
    at = datetime.fromtimestamp(now, tz=UTC)
    text = query.lower()
    return _parse_zh(text, at) or _parse_en(text, at)
