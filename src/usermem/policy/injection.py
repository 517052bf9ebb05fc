"""Memory-poisoning guard: values that read like instructions to a model, or that try to close the
prompt tags memories are injected into, are refused on write (reason `instruction_like`).

Deterministic patterns in Chinese and English, matched on the *confusable skeleton* of each string
(policy/normalize.py: NFKC, zero-width and other format characters removed, one space for any run of
spaces and tabs, Cyrillic/Greek look-alikes mapped to Latin letters), so `іgnоre`, `ｉｇｎｏｒｅ` and
`ig\u200bnore` read as `ignore`. The patterns cover the families seen in injection payloads rather
than fixed phrases: overriding earlier instructions, announcing new rules or an authority, replacing the
assistant's identity, demanding obedience, addressing the model directly, exfiltration, and chat
markup. tests/injection_corpus.py holds the payloads and benign statements they were tuned on (dev
split) and measured on (test split).

Second line of defence (`quote_if_instruction`, used by understand/assemble.py): a value that slipped
past the write guard (stored before the patterns widened, or written around it) and reads as an
instruction is withheld from the prompt; a value with weaker directive signals ("always reply…",
"你必须…", mostly genuine preferences) is rendered as a quoted user statement and flagged, never as a
bare sentence in the place the model reads rules. The assembler also escapes every value, so no value
can close a tag.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from usermem.policy.normalize import confusable_skeleton
from usermem.policy.wordedge import cjk_compile, has_cjk_seam

# Pieces shared by several English patterns.
_Q_EN = (r"(?:previous|prior|above|earlier|preceding|foregoing|former|system|original|initial|old|"
         r"developer'?s?|your|the\s+developer'?s?)")
_T_EN = (r"(?:instructions?|prompts?|rules|messages?|guidelines|guidance|directions|directives|orders|commands|"
         r"context|programming|settings|constraints|polic(?:y|ies)|filters?|restrictions|training)")
_V_EN = r"(?:ignore|disregard|forget|override|bypass|skip|neglect|drop|discard|abandon|忽略|无视|忘记)"
_Q_ZH = r"(?:之前|以上|上面|上述|前面|此前|先前|原来|原有|原先|系统|你的|你收到的|你被设定的|开发者的?|所有的?)"
_T_ZH = r"(?:指令|指示|提示词?|规则|要求|设定|约束|限制|命令|规定|内容|一切|安全策略)"

_SOURCES: tuple[tuple[str, str], ...] = (
        # --- chat markup -----------------------------------------------------------------------------------
        ("prompt_tag", r"</?\s*(?:user_facts|user_preferences|user_context|system|assistant|user|instructions?|"
                       r"im_start|im_end|tool|function_call|sys)\b[^>]{0,40}>"),
        ("chat_token", r"<\|[a-z_]{2,20}\|>|\[/?inst\]|<<\s*/?sys\s*>>|\[(?:system|sys|admin|developer)\]"),
        ("role_prefix", r"(?:^|\n)\s*(?:system|assistant|developer|系统|助手|管理员)\s*[:：]\s*(?:you\b|ignore|forget|"
                        r"from now|new |sure|ok(?:ay)?\b|i will|忽略|你|从现在|好的|无视|新的)"),
        # --- overriding earlier instructions ----------------------------------------------------------------
        ("override_en", r"\b" + _V_EN + r"\s+(?:\S+\s+){0,3}?" + _Q_EN + r"\s+(?:\S+\s+)?" + _T_EN + r"\b"),
        ("override_all_en", r"\b(?:ignore|disregard|forget)\s+(?:about\s+)?(?:all\s+(?:of\s+)?)?(?:the\s+)?"
                            r"(?:everything|anything|all|what(?:ever)?|above|foregoing)\b(?:\s+\S+){0,4}?\s*"
                            r"(?:above|before|earlier|previously|prior|so\s+far|until\s+now|up\s+to\s+now|"
                            r"(?:you\s+(?:were|have\s+been|'ve\s+been)\s+)(?:told|given|instructed)|"
                            r"the\s+developers?\s+(?:told|said))\b|\b(?:ignore|disregard)\s+the\s+above\b"),
        ("override_given_en", r"\b" + _V_EN + r"\s+(?:all\s+|any\s+|the\s+|of\s+)*(?:\S+\s+)?" + _T_EN + r"\s+(?:that\s+)?"
                              r"(?:you\s+(?:were|have\s+been|'ve\s+been|got|received)\s*(?:given|told)?|(?:came|come|"
                              r"were\s+given|given|written|stated)\s+(?:before|above|earlier|to\s+you)|above|before\s+this)"),
        ("stop_following_en", r"\b(?:do\s+not|don'?t|stop|no\s+longer|never)\s+(?:follow|obey|adhere\s+to|"
                              r"following|obeying|listen(?:ing)?\s+to)\s+(?:\S+\s+){0,2}?" + _Q_EN + r"?\s*"
                              r"(?:instructions?|rules|system\s+(?:message|prompt)|guidelines|prompt|developers?)\b"),
        ("override_zh", r"(?:忽略|无视|忘记|忘掉|覆盖|绕过|抛开|丢掉|丢弃|跳过|不要理会|别理会|不用理会|不要管|别管|不用管|"
                        r"不要遵守|别遵守|不必遵守|无需遵守|不再遵守|停止遵守|不要听|别听)(?:掉)?.{0,8}?" + _Q_ZH
                        + r".{0,8}?" + _T_ZH),
        ("void_zh", _Q_ZH + r".{0,10}?" + _T_ZH + r".{0,8}?(?:作废|不算数?|失效|无效|不再有效|取消)"),
        # --- new rules and authority claims -------------------------------------------------------------------
        ("new_rules_en", r"\b(?:new|updated|real|true|actual|secret|hidden|additional|important)\s+(?:system\s+|primary\s+|"
                         r"core\s+)?(?:rules?|instructions?|directives?|tasks?|orders?|policy|prompt)\s*[:：!—-]+\s*"
                         r".{0,60}?\b(?:you|assistant|ai|model|respond|reply|answer|always|never|must|reveal|output|"
                         r"ignore|print|say|pretend|act|obey|from\s+now)\b"),
        ("markdown_header", r"#{2,}\s*(?:new\s+)?(?:instructions?|system|prompt|rules?|指令|系统)\b"),
        ("directive_en", r"\byour\s+(?:new|real|true|only|primary|main|actual)\s+(?:\w+\s+)?(?:directive|instructions?|"
                         r"task|mission|goal|rule|purpose|job)\s+(?:is|are|will\s+be)\b"),
        ("authority_en", r"\b(?:system|admin(?:istrator)?|developer|root|operator|openai|anthropic)\s+(?:override|command|"
                         r"notice|message|instruction|directive|alert)\b\s*[:：—!-]"),
        ("mode_en", r"\b(?:enable|enter|activate|switch\s+(?:in)?to|turn\s+on|you\s+are\s+(?:now\s+)?in)\s+(?:the\s+)?"
                    r"(?:developer|dev|god|jailbreak|jailbroken|dan|unrestricted|unfiltered|debug|sudo|admin)\s+mode\b|"
                    r"\b(?:jailbreak|developer|dan|god)\s+mode\s+(?:is\s+)?(?:activated|enabled|engaged|on(?=\s*(?:[.!:;,]|$)))(?!\s+(?:on|for|in)\b)|"
                    r"\bsafety\s+(?:mode|filters?|guidelines)\s+(?:is\s+|are\s+)?(?:disabled|off|removed)\b"),
        ("new_rules_zh", r"(?:新的?|最高|最新|重要的?新?|真正的|隐藏的?|额外的?)(?:系统)?(?:指令|规则|命令|指示|任务)\s*[:：!！]"),
        ("authority_zh", r"(?:管理员|系统|开发者|官方|后台)(?:命令|通知|指令|消息|提示|要求)\s*[:：]|系统提示\s*[:：]"),
        ("mode_zh", r"(?:进入|开启|打开|切换到|启用|激活)(?:了)?(?:开发者|越狱|上帝|DAN|无限制|调试|管理员)模式|越狱模式|"
                    r"(?:解除|取消|关闭|去掉|移除)(?:所有|全部|一切)?(?:的)?(?:安全)?(?:限制|约束|过滤|审查)"),
        # --- identity and obedience ------------------------------------------------------------------------------
        ("persona_en", r"\byou\s+are\s+now\s+(?:a|an|the|dan|no\s+longer|free|unrestricted|called|named|my\s+"
                       r"(?:slave|servant|puppet))\b|\byou\s+are\s+no\s+longer\s+(?:bound|restricted|limited|required|an?\s+"
                       r"(?:ai|assistant))|\bfrom\s+now\s+on,?\s+(?:you|the\s+(?:assistant|ai|model))\s+(?:will|must|shall|"
                       r"are|should|have\s+to|only|can|need)\b|\b(?:act|pretend|behave)\s+(?:as|like)\s+(?:if\s+you\s+"
                       r"(?:are|were|have)\s+)?(?:dan|an?\s+(?:unrestricted|unfiltered|evil|jailbroken|uncensored)|no\s+"
                       r"(?:rules|restrictions|limits))|\bdo\s+anything\s+now\b"),
        ("obey_en", r"\b(?:obey|follow|listen\s+to)\s+(?:only\s+)?(?:me|my\s+(?:orders|commands|instructions|rules))\b|"
                    r"\bobey\s+(?:only\s+)?(?:the\s+user|this\s+(?:message|memory|note))\b"),
        ("persona_zh", r"你现在(?:是|扮演|变成|成为|就是)|从(?:现在|今以后|今往后|今天|此以后|此刻|这一刻)(?:起|开始|以后)?[,，]?"
                       r"(?:你|助手|AI)(?:必须|要|将|就是|是|只能|得|应该|需要)|扮演(?:一个)?(?:不受|没有)(?:任何)?(?:限制|约束)|"
                       r"(?:没有|不受)(?:任何)?(?:限制|约束)的(?:AI|人工智能|助手|模型)"),
        ("obey_zh", r"(?:服从|听从|听命于)(?:我|用户|这条)|(?:你|助手|AI)(?:要|必须|只能|得|应该|需要)?(?:无条件)?(?:地)?"
                    r"(?:听我的|听我一个人|服从|听从)|无条件(?:地)?(?:服从|听|执行)|只能听我|只听我的"),
        # --- addressing the model directly -----------------------------------------------------------------------
        ("addressed_en", r"\b(?:note|message|instruction|reminder)\s+(?:to|for)\s+(?:the\s+)?(?:ai|assistant|model|llm|"
                         r"chatbot|bot)\b|\battention,?\s+(?:ai|assistant|model|llm|chatbot)\b|\b(?:ai|llm|model)\s+"
                         r"instructions?\s*[:：]|\b(?:whenever|when|every\s+time|once)\s+you\s+(?:see|read|load|retrieve|"
                         r"encounter|process)\s+this\b|\bthe\s+(?:assistant|ai|model|chatbot|llm)\s+(?:must|should|shall|"
                         r"will\s+always|is\s+required\s+to|has\s+to|needs\s+to)\b|\bassistant\s*,\s*(?:whenever|when|"
                         r"always|from\s+now|you\s+must|ignore)"),
        ("addressed_zh", r"(?:AI|人工智能|助手|模型|机器人)\s*(?:请注意|注意了?)[:：,，]|当你(?:读到|看到|读取|检索到|加载)这(?:条|段|个|些)|"
                         r"(?:助手|AI|模型)(?:必须|应该|务必|一律|需要)"),
        # --- exfiltration and side effects -----------------------------------------------------------------------
        ("exfiltrate_en", r"\b(?:reveal|print|output|repeat|show|tell|display|leak|dump|give|share|recite|disclose)\s+"
                          r"(?:me\s+|us\s+)?(?:\S+\s+){0,3}?(?:your|the)\s+(?:\S+\s+)?(?:system\s+prompt|prompt|"
                          r"instructions|hidden\s+\w+|initial\s+\w+|configuration|guidelines)\b|\brepeat\s+(?:all\s+)?"
                          r"(?:of\s+)?(?:the\s+)?(?:text|words|everything|messages?|lines?)\s+(?:\S+\s+)?(?:above|before)\b|"
                          r"\b(?:output|list|print|show|dump|send|give|export)\s+(?:me\s+)?(?:all\s+)?(?:the\s+)?"
                          r"(?:memories|data|messages|conversations?|information|records)\s+(?:\S+\s+){0,2}?(?:of|about|for|"
                          r"from)\s+(?:every|all|other|each)\s+(?:\S+\s+)?users?\b"),
        ("side_effect_en", r"\b(?:send|forward|email|post|upload|transfer|exfiltrate)\b.{0,60}?\bto\s+(?:https?://|www\.|"
                           r"\S+@\S+\.\w+|\S+\.(?:com|net|org|io|ru|cn|xyz)\b)|\b(?:include|add|insert|append|put)\s+"
                           r"(?:this|the\s+following|a|my)\s+(?:link|url)\b|\b(?:reply|respond|answer)\s+(?:to\s+)?"
                           r"(?:every|all|any|each)\s+(?:\S+\s+)?(?:questions?|messages?|requests?|prompts?)\s+with\b|"
                           r"\bask\s+(?:the\s+user|them|him|her)\s+(?:for|to\s+(?:give|send|enter|provide))\s+(?:their|"
                           r"his|her|the)\s+(?:password|pin|card|credentials|verification\s+code|otp)"),
        ("exfiltrate_zh", r"(?:输出|打印|泄露|泄漏|告诉我|显示|透露|列出|给我|发给我|发送|原样|复述|展示)(?:一下|出来|出)?"
                          r".{0,6}?(?:系统提示词?|系统指令|隐藏指令|初始提示|提示词|系统设定|内部指令)|"
                          r"(?:系统提示词?|隐藏指令|初始提示|系统指令|内部指令).{0,8}?(?:打印|输出|告诉|发|泄露|透露|复述)|"
                          r"(?:其他|所有|别的|全部)用户的?(?:记忆|数据|信息|资料|对话).{0,8}?(?:列出|发|给|输出|导出|告诉)|"
                          r"重复(?:一遍)?(?:上面|以上|前面|之前)的?(?:所有)?(?:文字|内容|话|消息)"),
        ("side_effect_zh", r"(?:发送?|转发|传|上传|提交)(?:到|给)\s*(?:https?://|\S+@\S+|\S+\.(?:com|net|org|cn|io))|"
                           r"(?:附上|加上|带上|包含|插入)(?:这个|以下|这条)?链接|(?:索要|索取|询问|要求提供|套取)(?:用户的?)?"
                           r"(?:密码|验证码|银行卡|身份证)"),
)
# Every pattern with the word edges of policy.wordedge (an English cue glued to Chinese: "请ignore all previous
# instructions"), and as written (`\b` as Python reads it): the two match alike on text without a seam between a
# Chinese character and a Latin letter or digit (`has_cjk_seam`), where instruction_like runs the cheaper originals.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, cjk_compile(rx, re.IGNORECASE)) for name, rx in _SOURCES)
_PLAIN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.IGNORECASE)) for name, rx in _SOURCES)

# Patterns that cannot match text that is all ASCII: every match of each of them contains a non-ASCII
# character (a CJK ideograph the pattern requires). On an all-ASCII skeleton — most values — `instruction_like`
# tries only the others, and answers the same: the skipped ones could not have matched, and the order of the
# rest is kept, so the first match is the same pattern. tests/test_injection_ascii_fast_path.py proves the
# claim for each listed pattern by analysing its parsed regex, and compares both paths on random text.
NON_ASCII_ONLY: frozenset[str] = frozenset({
    "override_zh", "void_zh", "new_rules_zh", "authority_zh", "mode_zh", "persona_zh", "obey_zh", "addressed_zh",
    "exfiltrate_zh", "side_effect_zh",
})
_ASCII_PATTERNS = tuple((name, pattern) for name, pattern in _PLAIN if name not in NON_ASCII_ONLY)

# Weaker signals: the value speaks to whoever reads it, in the second person or to the assistant ("you must…",
# "你必须…"). Such a value may be a user's own words, so it is stored, but the assembler renders it as a quoted
# user statement and flags it. Ordinary preferences ("always use bullet points", "不要打电话") are not directives.
_DIRECTIVE_SOURCE = (
    r"\b(?:you|assistant|ai|model|chatbot)\s+(?:must|should|shall|have\s+to|need\s+to|are\s+(?:required|supposed|"
    r"expected)\s+to|will\s+(?:always|never|now)|may\s+not|are\s+not\s+allowed)\b|"
    r"(?:你|您)(?:必须|务必|一定要|应该|应当|不许|不准|只能|不得|需要)|(?:请你|你要)(?:永远|始终|一直|每次)")
_DIRECTIVE = cjk_compile(_DIRECTIVE_SOURCE, re.IGNORECASE)
_DIRECTIVE_PLAIN = re.compile(_DIRECTIVE_SOURCE, re.IGNORECASE)


def _strings(value: Any) -> Iterator[str]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def instruction_like(value: Any) -> str | None:
    """The name of the first pattern a string inside `value` matches, or None when it reads as plain data."""
    for text in _strings(value):
        skeleton = confusable_skeleton(text)
        patterns = _ASCII_PATTERNS if skeleton.isascii() else _PATTERNS if has_cjk_seam(skeleton) else _PLAIN
        for name, pattern in patterns:
            if pattern.search(skeleton):
                return name
    return None


def directive_like(value: Any) -> bool:
    """True when a string inside `value` is phrased as a directive to the reader (weaker than instruction_like)."""
    for text in _strings(value):
        skeleton = confusable_skeleton(text)
        if (_DIRECTIVE if has_cjk_seam(skeleton) else _DIRECTIVE_PLAIN).search(skeleton):
            return True
    return False


QUOTED_KEY = "quoted_user_statement"


def quote_if_instruction(value: Any) -> tuple[Any, bool]:
    """How a stored value may appear in a prompt: (rendered, flagged).

    - reads as an instruction (instruction_like): (None, True) — the caller withholds it;
    - addressed to the reader (directive_like: "you must…", "你必须…"): ({"quoted_user_statement": <the
      value>}, True) — data the user stated, quoted, never a bare sentence where the model reads rules;
    - otherwise: (value, False), unchanged.
    """
    if instruction_like(value) is not None:
        return None, True
    if directive_like(value):
        return {QUOTED_KEY: value}, True
    return value, False
