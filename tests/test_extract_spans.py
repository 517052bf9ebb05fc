"""Right tagger spans that used to be dropped (issue 13): the plausibility check of typed fields, zh and en."""

from __future__ import annotations

import pytest

from usermem.understand.extract import _plausible


@pytest.mark.parametrize(("key", "value"), [
    ("address", "广州市天河区体育西路103号维多利广场B座1208"),  # a block letter and a room number are no password
    ("address", "7 Rue des Lilas, 69003 Lyon"),
    ("address", "55 Elm Row, Edinburgh EH7 4AH"),
    ("budget", "一千五"),
    ("budget", "两千出头"),
    ("budget", "under fifty bucks"),
    ("budget", "price isn't an issue"),
    ("timezone", "GMT"),
    ("timezone", "Pacific"),
    ("timezone", "比北京慢一个小时"),
    ("timezone", "8 hours behind London"),
    ("birthday", "腊月初八"),
    ("birthday", "Christmas Eve"),
    ("city", "São Paulo"),
    ("city", "Bath"),
    ("work_city", "西二旗"),
    ("spouse", "我家那位"),
    ("children", "Lucía"),
    ("allergy", "蟹"),
])
def test_typed_values_in_any_script_are_plausible(key: str, value: str) -> None:
    assert _plausible(key, value)


@pytest.mark.parametrize(("key", "value"), [
    ("email", "wen"),  # a local part cut from its domain
    ("email", "chenlu@starlab"),
    ("children", "my"),
    ("spouse", "the"),
    ("address", "Apt 7B"),  # a fragment without a street
    ("address", "since 2019"),
    ("work_city", "字节"),  # a company, not a place
    ("city", "home"),
    ("city", "downtown"),
    ("allergy", "我"),
    ("likes", "的"),
    ("occupation", "医"),
    ("name", "Tr0ub4dor&3"),
    ("preferred_name", "秦始皇"),
    ("budget", "a lot"),
    ("birthday", "someday"),
    ("timezone", "soon"),
])
def test_the_checks_still_keep_out_what_they_were_for(key: str, value: str) -> None:
    assert not _plausible(key, value)
