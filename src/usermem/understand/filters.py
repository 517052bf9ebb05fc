"""Is a clause the user's own, lasting statement? Filters for questions, hypotheticals, third parties,
negation, one-off requests, jokes, quotes and fiction, and for in-dialogue corrections.

`clause_spans(text)` cuts a message into clauses with their offsets; `reasons(clause)` names why a clause
is not (fully) the user's own statement, and `allowed(field, reasons)` says whether a value of `field`
may still be taken from it (a third person in the clause blocks the user's city, not "my wife" as their
spouse; a negation blocks "我不是北京人" as a city, not "不吃猪肉" as a diet).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from usermem.understand.text import cjk_compile, cjk_edges

# Suppositions, counterfactuals and make-believe that no request or habit carries ("假使我是律师", "但愿我住在海边",
# "我住在三亚该多好", "做梦都想…", "in another life I'm a chef", "picture this: I live in Paris", "let's play a game
# where…"): shared by the clause filters (through HYPOTHETICAL) and the phrase rules (extract.py), which keep their
# own, narrower supposition list because "would"/"的话" there often frame a standing request.
SUPPOSITION = cjk_compile(r"假使|假若|若是|倘使|如若|假定|设想一下|但愿|该多好|多好啊|假装|做梦|梦里|梦中|梦到|梦见|"
                         r"下辈子|上辈子|来生|来世|下一世|"
                         r"\bhypothetical(?:ly)?\b|\bin (?:another|a different|a past|my next) life\b|"
                         r"\b(?:in )?an? (?:alternate|parallel) (?:universe|world|reality)\b|\bpicture this\b|"
                         r"\bin my dreams\b|\bdream on\b|\bi dreamt\b|\bi dreamed\b|\bplay a game where\b|\bpretend(?:ing)?\b|"
                         r"\bif only\b|\bwere i\b|\bhad i\b",
                         re.IGNORECASE)
HYPOTHETICAL = cjk_compile(r"如果|假如|假设|要是|万一|倘若|换[作做]是我|换[作做]我|\bif\b|\bsuppose\b|\bsupposing\b|\bimagine\b|\bwhat if\b|"
                          r"\bwould\b|\bwish\b|就好了|\bpretend\b|\blet'?s say\b|(?:^|[,;:—–-]\s*)say (?:i|i'm|we|my)\b|"
                          r"\bassuming\b|\bin theory\b|比方说|打个比方|就当|"
                          r"\bhypothetically\b|" + SUPPOSITION.pattern + r"|\bone day\b|\bsomeday\b|\bi'?d love to\b|梦想|\bwonder(?:ing)?\b|\bwhether\b",
                          re.IGNORECASE)
# A wish or a plan not yet carried out ("想养只狗", "thinking of getting a dog", "想换个城市", "我想学日语"), or a
# stay ("I'm staying at the Hilton"): the user does not live there, work there, speak it or own the animal yet; who they are with ("我和女朋友想去露营") still stands.
WISH = cjk_compile(r"想去|想搬|想换|想养|打算养|准备养|可能|也许|说不定|还没定|"
                  # a move only planned: "在准备去慕尼黑读研", "明年打算搬到成都", "planning to move to Oslo"
                  r"(?:准备|打算|计划|考虑)(?:要)?(?:去|搬|到|回)|\b(?:planning|plan|hoping|thinking of|thinking about|"
                  r"considering|going) (?:to )?(?:move|moving|relocate|relocating)\b|"
                  r"等我.{0,6}?(?:有钱|退休|毕业|结婚|买房|搬家|长大|有空|有时间)|等(?:到)?(?:退休|毕业|老了|有钱了|结婚|买了房)|想学|打算学|准备学|"
                  r"\bwant(?:s|ed)? to learn\b|(?<!currently )(?<!presently )\bstay(?:ing)? (?:at|in|with)\b|入住|"
                  r"\b(?:once|when|after) i (?:retire|graduate|get married|have (?:the )?(?:money|time)|make it)\b|"
                  r"\bwant(?:s|ed)? to (?:get|move|live|work)\b|"
                  r"\bthinking (?:of|about) (?:getting|moving|becoming|going)\b|\bplanning to (?:get|move)\b|"
                  r"\bi'?d (?:hate|love|like|rather|prefer) to (?:live|move|work|be based)\b|\bmight\b|\bmaybe\b",
                  re.IGNORECASE)
# What the user was, not is ("我以前住在武汉", "I used to be a teacher").
PAST = cjk_compile(r"以前|曾经|小时候|过去|(?:住|待|呆|读|念|工作|上班|上学)过(?!来|去|敏)|\bused to\b|\bformerly\b|\bpreviously\b|\bback when\b|\bas a kid\b",
                  re.IGNORECASE)
WISH_BLOCKS = frozenset({"city", "work_city", "hometown", "address", "timezone", "pets", "employer", "occupation",
                         "diet", "languages_spoken", "education"})
# One thing done once ("I read A Brief History of Time", "我昨天看了《流浪地球》") is an event, not a standing taste:
# it sets no like, dislike or hobby unless the clause says how the user feels about it or that it is a habit.
EVENT = cjk_compile(r"\bi (?:just |finally |recently )?(?:read|watched|saw|visited|tried|ate|bought|finished|went to)\b|"
                   r"(?:昨天|前天|上周|刚才|刚|今天)?(?:看了|读了|吃了|买了|去了|试了|玩了)", re.IGNORECASE)
_TASTE_OR_HABIT = cjk_compile(r"喜欢|爱|迷|好吃|好看|不错|讨厌|受不了|经常|总是|每|一直|"
                             r"(?i:\b(?:like[ds]?|love[ds]?|enjoy(?:ed)?|hate[ds]?|adore[ds]?|fan|favou?rite|every|always|"
                             r"usually|often|a lot|all the time|again and again)\b)")
EVENT_BLOCKS = frozenset({"likes", "dislikes", "hobbies"})
PAST_BLOCKS = frozenset({"city", "work_city", "address", "timezone", "pets", "employer", "occupation", "diet",
                         "allergy"})
QUESTION_END = re.compile(r"(?:[?？]|吗|呢|么|嘛|没有|不|来着)\s*[。.!！~]*\s*$")
QUESTION_START = cjk_compile(r"^\s*(?:(?:do i|am i|is my|are my|what(?:'s| is) my|where do i|how (?:do|can|should) i|"
                            r"can i|should i|which|what|who|where|when|why|how|is it|are there|does)\b|"
                            r"我是不是|我有没有|我该|我应该|哪|什么|怎么|为什么|多少|几|谁|是否)", re.IGNORECASE)
# Chinese questions without a question mark or 吗: "周末班哪里好", "用英语怎么说".
QUESTION_WORD = re.compile(r"哪里|哪儿|哪个|哪家|哪些|怎么办|怎么样|怎么说|怎么做|多少钱|好不好|行不行|可以吗|是不是|有没有|"
                           # 怎么 before a verb asks how ("一般怎么补充蛋白质啊"); not 不怎么 ("not much") nor 怎么也/都
                           # ("no matter how")
                           r"(?<![不没])怎么(?![也都着])|"
                           r"能不能|要不要|会不会|谁家|是谁|(?<![没不])什么(?![都也的])|"
                           # any A-not-A ("难不难", "贵不贵", "远不远", "去没去"): a yes-no question, mark or none
                           r"([\u4e00-\u9fff])(?<![不没])[不没]\1|"
                           # "差几个小时", "几点开门", "你几岁": 几 + a measure word asks a number (not 好几个, 十几个, 这几天)
                           r"(?<![好十这那前后没有])几(?:个|点|岁|号|天|次|年|月|周|分钟|小时|块|元|斤|公里|楼|层|位|口)")
# A sentence that asks for the assistant's opinion or a confirmation, with or without a question mark or 吗:
# "你觉得我是医生", "难道我住在杭州", "do you think I'm vegan", "any idea whether…", "is it true that…".
ASKS = cjk_compile(r"^\s*(?:难道|你觉得|你认为|你猜|你看我|是不是|有没有可能|请问)|"
                  r"^\s*(?:do|d'|would|wouldn't) you (?:think|reckon|say|guess)\b|^\s*(?:any idea|is it true|isn't it true)\b|"
                  r"\bi wonder\b|\bwhether\b", re.IGNORECASE)
# Someone else as the subject. Family words count too: "my son is allergic to eggs" is not the user's
# allergy (it does say the user has a son: family fields are exempt).
OTHERS = cjk_compile(r"(?<=[\u4e00-\u9fff])的人(?=一般|都|通常|往往|大多|大部分|多半|怎么|是不是)|"
                    r"\b(?:people|those|anyone|someone) who\b|\bmost people\b|朋友|同事|老板|领导|闺蜜|兄弟|哥哥|姐姐|弟弟|妹妹|我妈|我爸|爸爸|妈妈|父母|奶奶|爷爷|外婆|外公|"
                    r"表弟|表哥|表姐|表妹|堂弟|堂哥|堂姐|堂妹|舅舅|阿姨|姨妈|叔叔|姑姑|侄子|侄女|外甥|嫂子|姐夫|妹夫|亲戚|"
                    r"公公|婆婆|岳父|岳母|上司|下属|我姐|我哥|我弟|我妹|老妈|老爸|客人|保姆|房东|舍友|"
                    r"\b(?:cousin|uncle|aunt|auntie|nephew|niece|in-laws?|grandmother|grandfather|stepmom|stepdad)\b|"
                    r"室友|邻居|客户|同学|同桌|发小|死党|老师说|主角|角色|(?<!其)他|她|老婆|老公|妻子|丈夫|媳妇|老伴|爱人|儿子|女儿|孩子|男朋友|女朋友|对象|"
                    r"我先生|我太太|团队|我们公司(?!在|位于|的地址|总部在)|"
                    r"\b(?:friend|friend's|colleague|coworker|boss|manager|brother|sister|mum|mom|dad|mother|father|"
                    r"parents|grandma|grandpa|roommate|neighbou?r|client|he|she|his|her|they|their|character|wife|"
                    r"husband|son|daughter|kids?|boyfriend|girlfriend|partner|team|fiancée?|guests?|mate|buddy|visitors?|nanny|"
                    r"babysitter|landlord|landlady|housemate|flatmate|classmate|deskmate|bestie|bff)\b|\bmy date\b|"
                    r"\bthe new (?:intern|guy|girl|hire|starter|manager|boss|colleague|neighbou?rs?)\b|"
                    r"\bthe (?:guy|man|woman|lady|girl|boy|people|kid|couple)\b(?! i\b)|\bnext door\b|"
                    r"\bour (?:intern|guests?|visitors?|neighbou?rs?)\b",
                    re.IGNORECASE)
# The user denying they said or mean what follows ("我可没说我吃素", "我不是说要你简短，是要你别说废话",
# "I never said I was vegan, just that I like oat milk"): the clause holding the denial states nothing; the
# clause after it ("是要你别说废话") still does.
UNSAID = cjk_compile(r"我(?:可|又|也|并|从来)?没(?:有)?(?:说|讲)过?|我(?:并|又|可)?不是(?:说|讲|想说)|\bi never (?:said|claimed|told)\b|"
                    r"\bi didn'?t (?:say|mean|claim)\b|\bi'?m not saying\b|\bi wasn'?t saying\b|\bnot that i\b|"
                    r"\b(?:it )?doesn'?t mean i\b", re.IGNORECASE)
# A sentence the user takes back or disowns at its end, after the values it held: a retraction after a laugh
# ("我叫天才，来自天才星球，哈哈开玩笑的", "I'm a doctor lol jk"), a dream ("我老婆是新垣结衣（做梦中）",
# "…, in my dreams") or hearsay ("my hobby is collecting unread books, apparently", "…, or so she says").
DISOWN_TAIL = cjk_compile(r"(?:^|[\s,，.。!！~…（(—–-])(?:(?:哈哈+|呵呵+|嘿嘿|haha+|lol|lmao)[\s,，!！.。~]*)?"
                         r"(?:开玩笑的?|开个玩笑|逗你(?:的|玩的?)|骗你的|说着玩的|瞎说的|想想而已|做梦(?:呢|中|而已)|"
                         r"梦里(?:什么都有)?|据说(?:是)?|听说(?:的|是)|\bjust kidding\b|(?<!\bno )(?<!\bnot )\bkidding\b|\bjk\b|\bin my dreams\b|"
                         r"\bdream on\b|\bapparently\b|\bsupposedly\b|\ballegedly\b|"
                         r"\bor so (?:she|he|they|people|i'?m told|my \w+) (?:says?|said|claims?|tells? me|reckons?)\b)"
                         r"[\s!！.。~）)😂🤣😜]*$", re.IGNORECASE)
# A preference verb under negation or a weakening degree word ("并不喜欢喝咖啡", "不怎么喜欢爬山", "not really into
# hiking") says no like or hobby; it leaves the clause's other facts alone ("我的猫团子不太爱吃饭": a cat).
NEGATED_TASTE = cjk_compile(r"(?:不|并不|并没有|不怎么|不太|不是很|不是特别|没那么|没有很|不大)(?:喜欢|爱|感兴趣|热衷)|"
                           r"\bnot (?:really |that |particularly |very )?(?:into|keen on|fond of|a fan of|a big fan of)\b",
                           re.IGNORECASE)
TASTE_FIELDS = frozenset({"likes", "hobbies"})
NEGATION = cjk_compile(r"不是|不在|没有|没在|没养|从没|从来没|还没|不住|不再|并非|别按|不按|不用按|不会(?:说|讲|写|用)|\bnot\b|n't\b|\bnever\b|\bno longer\b|\banymore\b|\bany more\b",
                      re.IGNORECASE)
# Denying that one left affirms that one stayed: "moved to London for uni and never left", "来了就再也没离开过".
STAYED = cjk_compile(r"\bnever (?:left|looked back|moved (?:away|out|back|on))\b|\bhaven'?t left since\b|"
                    r"再也没(?:离开|走)|就没(?:离开|走|回去)|一直没(?:离开|走)|"
                    # negations that say "very much" or "still": "can't get enough of", "a hobby that never ended",
                    # "never gets old", "从来没腻过"
                    r"\bcan'?t get enough\b|\bcannot get enough\b|\bnever (?:gets?|got) (?:old|boring)\b|"
                    r"\bnever (?:get|gets|got) (?:tired|bored|sick) of\b|\b(?:that|which) never (?:ended|stopped|ends|stops)\b|"
                    r"从来?没腻过|百吃不厌|百听不厌|百看不厌|怎么都不腻", re.IGNORECASE)
ONE_OFF = cjk_compile(r"这次|这一次|这回|今天|今晚|明天|明早|明晚|后天|这周|本周|下周|下礼拜|下星期|下个月|过几天|这顿|这篇|这封|这份|暂时|临时|\bthis time\b|\bfor this one\b|"
                     r"\bjust for\b|\btonight\b|\btoday\b|\btomorrow\b|\bthis once\b|\bonly (?:today|tonight)\b|"
                     r"\bthis week(?:end)?\b|\bnext week(?:end)?\b|\bfor now\b|\bjust this\b|\bfor the rest of this\b|"
                     r"出差|旅游|开会|参会|\btrip\b|\bvisiting\b|\bfor (?:a|the) (?:conference|wedding|meeting|workshop|"
                     r"funeral|few days|festival|weekend|holidays?|match|game|concert|gig|race|marathon)\b|\b(?:until|till|til) (?:mon|tues|wednes|thurs|fri|satur|sun)day\b", re.IGNORECASE)
# Latin laughs are matched by letter edges, not \b: a Chinese character next to one is a word character too ("加班了lol").
LAUGH = re.compile(r"哈哈|呵呵|😂|🤣|😜|🙃|(?<![A-Za-z])(?:lol|lmao|haha|rofl)(?![A-Za-z])", re.IGNORECASE)
JOKE = cjk_compile(r"开玩笑|开个玩笑|逗你|骗你|说着玩|just kidding|\bjk\b|i'?m kidding|just for fun|for fun", re.IGNORECASE)
FICTION = cjk_compile(r"主角|角色|扮演|台词|小说|剧本|段子|梗|口头禅|翻译|纪录片里|看了个纪录片|电影里|剧里|书里|新闻说|新闻里|报道说|"
                     r"文章说|据报道|讲一个|讲的是|\b(?:the )?(?:article|documentary|movie|film|news|study|report|book|"
                     r"paper) (?:says|said|shows|claims|is about)\b|\bin the (?:movie|film|book|show|article|news)\b|写[一个首篇段]+(?:故事|诗|歌)|\b(?:poem|story|song|limerick)s? "
                     r"about\b|\bwrite (?:me )?(?:a|an) (?:poem|story|song|limerick)\b|\bcharacter\b|\btranslate\b|\bnovel\b|\bstory\b|"
                     r"\bscript\b|\bquote\b|\brole-?play\b|\bpretend\b|\bplay the (?:role|part) of\b", re.IGNORECASE)
# A single quote opens a quotation only where it does not follow a letter ("I'm at my parents' place" quotes nothing).
QUOTED = re.compile(r"“[^”]*”|「[^」]*」|\"[^\"]*\"|(?<![A-Za-z])'[^'\n]{3,}'(?=\W|$)")
# Reported speech: what follows "my friend says" / "他说" in the sentence is someone else's statement,
# family words included ("my friend told me her wife Sarah..." is not the user's spouse).
_REPORTER_ZH = (r"朋友|同事|同桌|发小|老板|领导|总监|部长|闺蜜|兄弟|哥哥|姐姐|弟弟|妹妹|我妈|我爸|爸爸|妈妈|父母|室友|邻居|客户|同学|老师|医生|"
                r"组长|经理|主管|导师|教练|师傅|队友|组员|搭档|学长|学姐|师兄|师姐|前任|网友|实习生|新人|老细|上司|"
                r"他们|她们|他|她|别人|人家|大家")
REPORTED = cjk_compile(r"(?:" + _REPORTER_ZH + r")(?:跟我|和我|对我|也)?(?:说|讲|告诉我|觉得|认为|以为|提到)|听说|据说|"
                      # Cantonese 话 = said ("老细话下年要搬去深圳"), not 话多 / 话少 / 话不多
                      r"(?:" + _REPORTER_ZH + r")(?:同我|也)?话(?![多少不])|"
                      r"\b(?:he|she|they|friend|colleague|coworker|boss|manager|brother|sister|mum|mom|dad|mother|father|"
                      r"parents|roommate|neighbou?r|client|someone|people|everyone|coach|teacher|mentor|"
                      r"trainer|tutor|advisor|supervisor)\s+(?:always\s+|just\s+|also\s+)?"
                      r"(?:says|said|told me|tells me|thinks|thought|reckons|claims|claimed|mentioned|insists)\b|"
                      r"\baccording to\b|\bapparently\b|\brumou?rs? (?:has it|says?|is)\b|\bword (?:is|has it)\b|\bsupposedly\b|"
                      r"\ballegedly\b|\bi(?:'ve)? heard (?:that|he|she|they)\b|传言|传闻|有人说|网上说", re.IGNORECASE)
# Anyone of the user's circle as the speaker ("my classmate says…", "our department head told me…"): what follows is
# theirs, though the speaker may be the user's relative ("my missus says I snore": a spouse), so it counts as a third
# party (family fields stay) rather than as hearsay. Medical people and results are left out: "my doctor says I have
# high blood pressure" is the user's own condition.
SPEAKER = cjk_compile(r"\b(?:my|our)\s+(?:\w+\s+){0,2}?(?!(?:doctor|gp|dentist|physio|therapist|allergist|dietitian|"
                     r"nutritionist|specialist|consultant|results?|tests?)\s)\w+\s+(?:always\s+|just\s+|also\s+)?"
                     r"(?:says|said|told me|tells me|thinks|reckons|claims|claimed|insists)\b", re.IGNORECASE)
# Another person's relatives and animals: "her wife", "他家的猫", "朋友的儿子" are not the user's family.
OTHERS_FAMILY = cjk_compile(r"\b(?:his|her|their|your)\s+(?:\w+\s+)?(?:wife|husband|partner|fianc[ée]e?|son|daughter|kids?|"
                           r"children|baby|toddler|boy|girl|twins|dog|cat|puppy|kitten|parrot|hamster|rabbit|fish|"
                           r"goldfish|pet|pets|bird|turtle|horse)\b|"
                           r"\b(?:my|our|the|a)\s+(?:\w+\s+)?(?:son|daughter|kid|friend|mate|neighbou?r|sister|brother|mum|mom|"
                           r"dad|boss|colleague)'s\s+(?:\w+\s+)?(?:dog|cat|puppy|kitten|parrot|hamster|rabbit|pet|wife|husband|"
                           r"son|daughter|kids?|fianc[ée]e?|partner|boyfriend|girlfriend)(?!\w)|"
                           r"(?:(?<!其)他|她|他们|她们|你|朋友|同事|邻居|别人|人家|同学|室友|儿子|女儿|孩子|老公|老婆|我妈|我爸|"
                           r"我姐|我哥|我弟|我妹|老妈|老爸|客户|老板|阿姨|叔叔|大爷|大妈|奶奶|爷爷|隔壁|"
                           r"(?<![我咱])(?:老|小)[\u4e00-\u9fff](?<![家我]))(?:的|家的?|家)"
                           r"(?:老公|老婆|妻子|丈夫|先生|太太|儿子|女儿|孩子|宝宝|小孩|猫|狗|鹦鹉|仓鼠|兔子|鱼|宠物)",
                           re.IGNORECASE)
# Another person's contact details or particulars: "我同学的邮箱是 …", "my colleague's number is …" (the value
# is theirs even when the sentence goes on about the user: "…，帮我给她写封信").
OTHERS_PARTICULARS = cjk_compile(r"(?:朋友|同事|老板|领导|闺蜜|同学|室友|舍友|邻居|客户|上司|下属|房东|(?<!其)他|她|他们|她们|"
                                r"哥哥|姐姐|弟弟|妹妹|我妈|我爸|妈妈|爸爸|老妈|老爸|表姐|表哥|表妹|表弟)的?"
                                r"(?:邮箱|电邮|电话|手机号?|号码|地址|微信号?|生日|名字|全名)|"
                                r"\b(?:friend|colleague|coworker|boss|manager|brother|sister|mum|mom|dad|roommate|"
                                r"neighbou?r|client|landlord|flatmate|housemate)'s\s+(?:\w+\s+)?(?:e-?mail|number|phone|"
                                r"mobile|address|birthday|name)\b|\b(?:his|her|their)\s+(?:e-?mail|number|phone number|"
                                r"mobile|address|birthday)\b", re.IGNORECASE)
# A whole sentence asked as a question: "Do you think I live in X?", "你觉得我是医生吗？".
QUESTION_SENTENCE = cjk_compile(r"^\s*(?:do|does|did|is|are|was|were|can|could|would|will|should|have|has|what|who|"
                               r"where|when|why|how|which|you think|isn'?t|aren'?t|don'?t)\b[^?？]*[?？]\s*$|"
                               r"^\s*(?:你觉得|你说|你看|你猜|是不是|难道|请问|有没有可能)[^?？]*(?:[?？]|吗|呢)\s*$",
                               re.IGNORECASE)
CORRECTION = re.compile(r"^\s*(?:(?:嗯+|额+|呃+|哦+|噢+|啊+|唔+|诶+|(?i:hmm+|umm*|uh+|er+|oh|well))\s*[，,.。…~\s]*)?(?:不对|不是不是|我?(?:说|打|记|搞|弄|写)错了?|哦不|噢不|错了|更正|纠正一下|我是说|应该是|"
                        r"诶?还是|算了|哦不对|其实是|其实|改成|改为|(?:hmm,? )?on second thought|hmm,? |actually|wait,? no|"
                        r"no wait|no\s*[,—–-]|nope|sorry,?|correction|不好意思[，,]?|抱歉[，,]?|"
                        r"i mean|i meant|scratch that|make that|oops)",
                        re.IGNORECASE)
# A dot inside a number ("5.20", "$1,200.50") or after a title ("Dr. Wu") and a thousands comma end nothing.
_KEEP = r"(?<=\d)[.,](?=\d)|" + "|".join(rf"(?<![A-Za-z]{t})(?<={t})\." for t in ("Dr", "Mr", "Ms", "Mrs", "St", "Prof"))
_CLAUSE = re.compile(r"(?:" + _KEEP + r"|[^，,。.!！?？；;\n—])+[，,。.!！?？；;\n—]*")
_SENTENCE = re.compile(r"(?:" + _KEEP + r"|[^。.!！?？\n])+[。.!！?？\n]*")
# English conditions after the statement ("ring me on 0412 000 789 if the courier can't find it") leave what
# came before them the user's; Chinese conditions (的话, 就好了) close the clause they belong to.
HYPOTHETICAL_EN_AFTER = cjk_compile(r"\b(?:if|unless|in case)\b", re.IGNORECASE)

# A person named as the subject ("Lisa is vegan", "Ben from accounting is from Toronto", "小张住在苏州").
NAMED_SUBJECT = cjk_compile(r"^\s*(?!I\b)[A-Z][a-z]+(?:\s+from\s+\w+)?(?:'s|\s+(?:is|was|has|lives|works|said|says|"
                           r"thinks))\b|^\s*(?:小|老)[\u4e00-\u9fff](?<![家板婆公妈爸])(?:住|在|是|对|喜欢|说|家)")
_ME = cjk_compile(r"我|\b(?!i人)(?:i|i'm|i've|my|me)\b", re.IGNORECASE)
# Someone of the user's circle as the subject of the clause ("我们组长每天七点到公司", "my coach runs every morning"):
# roles a user may also hold themselves ("我是教练") count only in this position.
# The role may be reached through the user's unit ("我们部门经理", "我们组的组长", "my department head").
SUBJECT_OTHER = cjk_compile(r"^\s*(?:(?:我们|咱们|我)(?:的|家)?)(?:(?:部门|组里?|团队|公司|单位|项目组|科室|课题组|实验室|"
                           r"班上|班里|学校|系里|院里|店里)的?)?(?:部长|总监|老总|组长|经理|主管|导师|教练|师傅|队友|组员|搭档|"
                           r"学生|学长|学姐|"
                           r"师兄|师姐|师弟|师妹|前任|网友|合伙人|助理|秘书|医生|老师|班主任)(?!是我)|"
                           r"^\s*(?:my|our)\s+(?:\w+\s+)?(?:team ?lead|manager|supervisor|advisor|adviser|coach|teammates?|"
                           r"students?|assistant|doctor|dentist|therapist|ex|trainer|tutor|teacher|mentor|director|department head|"
                           r"head of \w+|principal|ceo|cto|cfo|coo|vp|founder|co-?founder|boss|intern|interns|landlord|landlady|"
                           r"professor|lecturer|supervisor|line manager)\b(?!'s)(?!\s+(?:is|are) (?:me|mine)\b)", re.IGNORECASE)
# People outside the user's household: their animals and children are not the user's ("我同事养了一只柯基").
NON_FAMILY = cjk_compile(r"朋友|同事|老板|领导|闺蜜|室友|舍友|邻居|客户|同学|同桌|发小|死党|上司|下属|房东|保姆|"
                        r"\b(?:friend|colleague|coworker|boss|manager|roommate|neighbou?r|client|mate|buddy|nanny|"
                        r"babysitter|landlord|landlady|housemate|flatmate)\b", re.IGNORECASE)
# Fields whose value names another person or an animal: a third person in the clause is expected.
FAMILY = frozenset({"spouse", "children", "pets"})
# A value that is itself a denial ("not a student", "no allergies", "不是过敏"): no positive fact of a field
# outside NEGATIVE_OK.
NEGATED_VALUE = re.compile(r"^\s*(?:not|no|never|none|不是|没有|并非|从不|从没)(?![a-z.])", re.IGNORECASE)
# Fields whose value is itself a negation or limit ("不吃猪肉", "don't call after 9").
NEGATIVE_OK = frozenset({"dislikes", "diet", "contact", "contact_hours", "reply_tone", "reply_length", "reply_format",
                         "news_topics", "travel_preferences", "budget", "accessibility", "medical_history", "schedule"})
# Fields a laugh in the clause or elsewhere in the sentence turns into irony ("我最喜欢加班了，哈哈哈"); other fields keep
# a value said with a laugh.
IRONY_PRONE = frozenset({"likes", "dislikes", "hobbies", "occupation"})
# Fields a one-off request never sets.
LASTING_ONLY = frozenset({"language", "reply_length", "reply_format", "reply_tone", "report_format", "preferred_name",
                          "city", "work_city", "diet", "contact_channel", "usual_order", "timezone"})


# "我不是素食主义者", "I'm not vegetarian": the user denies being something; a diet or a condition said this way
# is not theirs (while "不吃猪肉" is a diet said as a negation).
NOT_IDENTITY = cjk_compile(r"不是|并非|算不上|谈不上|称不上|\bi'?m not\b|\bi am not\b|\bnot an?\b|\bno longer\b|\bnot really\b|"
                          r"\bwouldn'?t (?:say|call)\b|\bnot exactly\b", re.IGNORECASE)
IDENTITY_FIELDS = frozenset({"diet", "medical_history", "accessibility", "occupation", "hobbies"})

# An errand the user runs for someone else ("让我给他订高铁票，要一等座", "book him a table, somewhere quiet"): the
# clause and the clauses after it that name no subject of their own state that person's wishes, not the user's.
ON_BEHALF = cjk_compile(r"(?:给|帮|替|为)(?:他|她|他们|她们|老板|领导|上司|客户|同事|朋友|爸妈|父母|我妈|我爸|老妈|老爸|"
                       r"老婆|老公|孩子|儿子|女儿)(?:们)?(?:订|买|预订|预约|约|挑|选|找|安排|办|准备|报名|叫|点)|"
                       r"\b(?:book|get|buy|order|find|reserve|pick)\s+(?:him|her|them)\b|"
                       r"\bon (?:his|her|their) behalf\b|\b(?:booking|ordering|buying|arranging) (?:\w+ )?for (?:him|her|them|"
                       r"my (?:boss|manager|client|colleague|mum|mom|dad|parents|wife|husband))\b", re.IGNORECASE)
# What the user cannot do says they do not have it: "我 roommate 对猫过敏，所以我不能养猫", "房东不让养狗"
# (while "我不能吃辣" is a diet: diet and the health fields are not blocked).
CANNOT = re.compile(r"(?:不能|不可以|不让|不准|不许|没法|无法)(?!不)|(?:养|住|待)不了")
CANNOT_BLOCKS = frozenset({"city", "work_city", "hometown", "address", "pets", "employer", "occupation",
                           "languages_spoken", "education"})
# Idleness or a vice offered as a hobby or a skill is a joke about oneself ("我的爱好是躺平，特长是拖延", "爱好是发工资
# 那天", "my hobby is napping"); it sets no hobby or like. A skill no one can have ("fluent in sarcasm", "阴阳怪气十级")
# makes the whole clause a joke, the language beside it included ("fluent in sarcasm and broken French").
IDLE_HOBBY = cjk_compile(r"躺平|摸鱼|划水|拖延|发呆|睡懒觉|睡觉|等外卖|发工资|领工资|发薪|葛优躺|混日子|吃了睡|"
                        r"\b(?:sleeping|napping|procrastinat\w*|doing nothing|payday|lying around)\b", re.IGNORECASE)
MOCK_SKILL = cjk_compile(r"(?:精通|擅长|熟练掌握)(?:阴阳怪气|摸鱼|划水|废话|拖延|躺平|甩锅)|(?:阴阳怪气|摸鱼|划水|废话|拖延|甩锅)十级|"
                        r"\b(?:fluent|native|bilingual) in (?:sarcasm|emoji|memes?|gibberish|nonsense|dad jokes|excuses|"
                        r"procrastination|passive[- ]aggressive\w*|corporate[- ]speak|baby talk|swearing)\b|"
                        r"\bspeak fluent (?:sarcasm|emoji|memes?|gibberish|nonsense|excuses)\b", re.IGNORECASE)
# Offering to answer questions on a topic ("ask me anything about Netflix", "有啥问题问我就对了") asks for no news on it.
OFFER = cjk_compile(r"\bask me (?:anything )?about\b|\bi (?:can|could) tell you (?:all|everything) about\b|问我就对了|"
                   r"(?:都|尽管)可以问我|尽管问我", re.IGNORECASE)
OFFER_BLOCKS = frozenset({"news_topics", "likes", "hobbies"})
# A relative's word inside another relative's title: "孩子他爸" is the user's husband, "the kids' mum" their wife.
KIN_TITLE = cjk_compile(r"(?:孩子|娃|儿子|女儿|宝宝)(?:他|她)?(?:爸|妈|爹|娘)|\b(?:the|our|my)\s+kids'?\s+(?:dad|mum|mom|father|"
                       r"mother)\b", re.IGNORECASE)
# A comparison ("阿杰听着像小孩", "像个孩子一样", "sounds like a kid") has no relative or animal in it.
_SIMILE_BEFORE = cjk_compile(r"(?:像|好像|就像)(?:个|一个|只|一只|条|一条)?\s*$|"
                            r"\b(?:sounds?|looks?|feels?|acts?|acting|behaves?|behaving)\s+like\s+(?:an?\s+|the\s+)?$|"
                            r"\blike\s+an?\s+$", re.IGNORECASE)
# A 是…的 predicate describes a person ("我老婆是教英语的"), it names no one.
_DESCRIBED_BEFORE = re.compile(r"是\s*(?:个|一个|一名|名|位)?\s*$")
NAMING_FIELDS = frozenset({"spouse", "children", "pets", "name", "preferred_name"})


def not_a_relative(key: str, text: str, start: int, end: int) -> bool:
    """True when the value `text[start:end]` of a family or name field is only part of someone's title, a comparison
    or a description: "孩子他爸" (no 孩子 of its own), "听着像小孩", "我老婆是教英语的"."""
    if key not in NAMING_FIELDS or start < 0:
        return False
    if key in FAMILY and any(m.start() <= start and end <= m.end() and not (m.start() == start and m.end() == end)
                             for m in KIN_TITLE.finditer(text)):
        return True
    before = text[max(0, start - 24):start]
    if key in FAMILY and _SIMILE_BEFORE.search(before):
        return True
    return bool(_DESCRIBED_BEFORE.search(before) and text[end:end + 1] == "的")


# A negator right before the value's words: "我不吃素" (diet 吃素), "我没孩子", "I'm not vegan", "no kids" — the value
# is denied. Fields whose value is itself a limit keep it ("不要香菜": a dislike of 香菜), except the identities among
# them (diet, conditions). "别叫我老师" / "don't call me Sir": a form of address refused, not chosen.
_NEGATOR_BEFORE = cjk_compile(r"(?:不|没|未|(?i:\bnot|\bnever|\bno|n't))\s*$")
_REFUSED_ADDRESS = cjk_compile(r"(?:别|不要|甭|不许|不用)(?:再)?(?:叫|喊|称呼)我\s*$|"
                               r"(?i:\b(?:don'?t|do not|never|stop|quit)\s+(?:calling|call)\s+me\s*$)")
_DENIABLE = frozenset({"diet", "accessibility", "medical_history"})


def denied_value(key: str, text: str, start: int) -> bool:
    """True when the value starting at `text[start]` is denied or refused by the words right before it."""
    if start < 0:
        return False
    before = text[max(0, start - 24):start]
    if key == "preferred_name" and _REFUSED_ADDRESS.search(before):
        return True
    return (key not in NEGATIVE_OK or key in _DENIABLE) and bool(_NEGATOR_BEFORE.search(before))


# Whose a value said in an earlier turn really is, or that it was wrong: "是丸子，团子是我朋友家的", "Luna's my sister's",
# "豆豆是我妈家的狗", "不是虾，是蟹", "aspirin's fine", "其他坚果还好".
_OWNER = (r"(?:我|my\s+|our\s+)?(?:\w+\s+)?(?:朋友|同事|同学|邻居|室友|舍友|闺蜜|老板|领导|客户|妈|爸|姐|哥|弟|妹|老公|老婆|"
          r"儿子|女儿|表[哥姐弟妹]|堂[哥姐弟妹]|阿姨|叔叔|奶奶|爷爷|外婆|外公|"
          r"(?i:friend|colleague|coworker|neighbou?r|roommate|flatmate|sister|brother|mum|mom|dad|mother|father|"
          r"husband|wife|partner|boss|cousin|aunt|uncle|son|daughter))")
_THEIRS_AFTER = re.compile(r"\s*(?:是|(?i:'s|’s|\s+is|\s+was)\s+)" + _OWNER + r"(?:家)?(?:的|(?i:'s|’s))")
_FINE_AFTER = cjk_compile(r"\s*(?:没事|没问题|能用|能吃|还好|不过敏|(?i:'s fine|’s fine|\s+is fine|'s ok|\s+is ok|"
                         r"\s+is okay|'s okay)\b)")
_DENIED_BEFORE = cjk_compile(r"(?:不是|并不是|(?i:\bnot|n't))\s*$")


def disowned_earlier(text: str, value: str) -> bool:
    """True when `text` (a later turn) gives an earlier value to someone else or takes it back: "团子是我朋友家的",
    "Luna's my sister's", "不是虾，是蟹", "aspirin's fine"."""
    value = value.strip()
    if len(value) < 2 and not re.fullmatch(r"[\u4e00-\u9fff]", value):
        return False
    for m in re.finditer(re.escape(value), text, re.IGNORECASE):
        if _THEIRS_AFTER.match(text, m.end()) or _FINE_AFTER.match(text, m.end()) or \
                _DENIED_BEFORE.search(text[max(0, m.start() - 6):m.start()]):
            return True
    return False


def errand_for_other(clause: str) -> bool:
    """The clause is an errand for someone else: it and the subjectless clauses after it are that person's."""
    return ON_BEHALF.search(clause) is not None


# An English conjunction that opens a clause with its own subject ("…two years ago and I still can't get used to…",
# "I live in Leeds but my sister…"): the clauses are judged apart.
_NEW_SUBJECT = cjk_compile(r"\s(?=(?:and|but|so|because|while|whereas)\s+(?:i|i'm|i've|i'd|i'll|we|we're|we've|my|our|he|"
                          r"she|they|he's|she's|they're|his|her|their)\b)", re.IGNORECASE)


_OPENS_WITH_CONJUNCTION = cjk_compile(r"\s*(?:and|but|so|because|while|whereas)\b", re.IGNORECASE)


def clause_spans(text: str) -> list[tuple[int, int]]:
    out = []
    for m in _CLAUSE.finditer(text):
        if not m.group(0).strip():
            continue
        start = m.start()
        for cut in _NEW_SUBJECT.finditer(text, m.start(), m.end()):
            if text[start:cut.end()].strip():
                out.append((start, cut.end()))
                start = cut.end()
        out.append((start, m.end()))
    return out


# The longest sentence judged as one (the bank's longest is 259 characters). A longer run without a sentence end
# ("two cats: Milo, Milo, …" for 18,000 characters) is judged in pieces cut at a clause boundary: every clause is
# judged against the sentence before it, so one unbounded sentence cost quadratic time (a 20,000-character message
# took a minute of CPU); in pieces the cost is linear in the message.
MAX_SENTENCE_CHARS = 400
_PIECE_END = re.compile(r"[，,；;、]\s*|\s+")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for m in _SENTENCE.finditer(text):
        if not m.group(0).strip():
            continue
        a, b = m.span()
        while b - a > MAX_SENTENCE_CHARS:
            cuts = [c.end() for c in _PIECE_END.finditer(text, a + 1, a + MAX_SENTENCE_CHARS)]
            cut = cuts[-1] if cuts else a + MAX_SENTENCE_CHARS
            if text[a:cut].strip():
                out.append((a, cut))
            a = cut
        if text[a:b].strip():
            out.append((a, b))
    return out


def mask_quotes(text: str) -> str:
    """Quoted speech blanked out (same length, so offsets stay valid)."""
    return QUOTED.sub(lambda m: " " * len(m.group(0)), text)


_HEARSAY_TAIL = re.compile(r"[,，]\s*(?:apparently|supposedly|allegedly|据说|听说是)\s*[.!。！]*\s*$", re.IGNORECASE)


# A one-off said once for the whole sentence ("for this report only, do it as a PowerPoint", "just this once, …",
# "仅此一次，…"): every clause of it is the one-off, not only the clause holding the words (`reasons` reads it on the
# sentence up to and including each clause, so `ONE_OFF` need not list these words again).
ONE_OFF_SENTENCE = cjk_compile(r"\bfor (?:this|that|today'?s|tomorrow'?s|tonight'?s) [\w' ]{1,30}? only\b|\bjust (?:this|for) "
                               r"once\b|\bthis one time\b|仅此一次|就这一次|只这一次|下不为例", re.IGNORECASE)


def sentence_reasons(sentence: str) -> set[str]:
    out = set()
    if ONE_OFF_SENTENCE.search(sentence):
        out.add("one_off")
    if HYPOTHETICAL.search(sentence):
        out.add("hypothetical")
    if JOKE.search(sentence):
        out.add("joke")
    if FICTION.search(sentence):
        out.add("quote")
    if _HEARSAY_TAIL.search(sentence):  # "my hobby is collecting unread books, apparently"
        out.add("reported")
    return out


def reasons(clause: str, before: str = "", sentence: str | None = None) -> set[str]:
    """Why `clause` is not the user's own lasting statement (empty: it is). `before`: the sentence so far;
    `sentence`: the whole sentence (a sentence asked as a question makes every clause of it one)."""
    out = sentence_reasons(before + clause)
    if REPORTED.search(before + clause):
        out.add("reported")
    elif SPEAKER.search(before + clause):
        out.add("third_party")
    if sentence is not None and (QUESTION_SENTENCE.search(sentence) or ASKS.search(sentence)):
        out.add("question")
    if sentence is not None and DISOWN_TAIL.search(sentence):
        out.add("joke")  # taken back or disowned at the sentence's end: nothing before it stands
    if UNSAID.search(clause) or (_OPENS_WITH_CONJUNCTION.match(clause) and UNSAID.search(before)):
        out.add("reported")  # the user denies saying it (also what "I never said X so I'm Y" goes on to)
    c = clause.strip()
    if OTHERS_FAMILY.search(c) or OTHERS_PARTICULARS.search(c):
        out.add("others_family")
    elif sentence is not None and OTHERS_FAMILY.search(sentence) and not _ME.search(sentence):
        out.add("others_family")  # "Max, the neighbour's dog, barked all night": an apposition names the owner
    if QUESTION_END.search(c) or QUESTION_START.search(c) or QUESTION_WORD.search(c) or ASKS.search(c):
        out.add("question")
    if SUBJECT_OTHER.search(c):
        out.add("third_party")
    if (OTHERS.search(c) or NAMED_SUBJECT.search(c)) and not (NAMED_SUBJECT.search(c) and _ME.search(c)
                                                            and not OTHERS.search(c)):
        out.add("third_party")
        if NON_FAMILY.search(c):
            out.add("other_person")
    if NEGATION.search(STAYED.sub(" ", c)):
        out.add("negation")
    if NOT_IDENTITY.search(c):
        out.add("not_identity")
    if NEGATED_TASTE.search(c):
        out.add("not_taste")
    if ON_BEHALF.search(c):
        out.add("third_party")
    if CANNOT.search(c):
        out.add("cannot")
    if IDLE_HOBBY.search(c):
        out.add("idle_hobby")
    if MOCK_SKILL.search(c):
        out.add("joke")
    if OFFER.search(c):
        out.add("offer")
    if ONE_OFF.search(c):
        out.add("one_off")
    if WISH.search(c):
        out.add("wish")
    if PAST.search(c):
        out.add("past")
    if EVENT.search(c) and not _TASTE_OR_HABIT.search(c):
        out.add("event")
    if LAUGH.search(c):
        out.add("laugh")
    elif sentence is not None and LAUGH.search(sentence):  # "我最喜欢加班了，哈哈哈": irony about a preference
        out.add("laugh_nearby")
    return out


# A request about how the assistant replies, put as a question: "你说话能不能随意点", "能用四川话跟我聊吗？", "中英双语回复
#可以吗", "could you keep it shorter?" — the user asks for a way of replying (a preference), not whether something is
# true; a question about the assistant's abilities is none ("你会说日语吗", "你能用粤语回答吗？就是好奇问问").
REPLY_FIELDS = frozenset({"reply_tone", "reply_length", "reply_format", "language"})
REPLY_REQUEST = cjk_compile(
    r"^\s*(?:你|您)?(?:以后|之后|平时|每次)?(?:回答|回复|说话|讲话|聊天|写东西)?(?:能不能|可不可以|能否|可以|能)(?!不能|力)"
    r"[^，,。；;?？]{1,14}?(?:点|一点|一些|些|回|回复|回答|说|聊|写|讲)[^，,。；;?？]{0,6}?(?:吗|嘛|呀|吧|么)?\s*[?？]?\s*$|"
    r"^\s*[^，,。；;?？]{1,10}?(?:回复|回答|回我|说|聊)(?:可以|行)吗\s*[?？]?\s*$|"
    r"^\s*(?i:(?:can|could|would) you (?:please |pls )?(?:be|keep|make|reply|answer|write|talk|respond|stick|switch|go|use)\b"
    r"[^?]*\??\s*$)")
CURIOUS = cjk_compile(r"好奇|问问|会不会|会说|会讲|懂不懂|(?i:\bcurious\b|\bare you able\b|\bdo you (?:speak|know)\b|"
                     r"\bjust wondering\b)")


def reply_request(clause: str, message: str | None = None) -> bool:
    """Whether a clause put as a question asks for a way of replying (its reply-style values are the user's);
    `message`: the whole message, where a word of curiosity ("就是好奇问问") makes it a question again."""
    return REPLY_REQUEST.search(clause.strip().rstrip("，,;；")) is not None and not CURIOUS.search(message if message is not None else clause)


def hypothetical_only_after(before: str, clause: str, value_end: int) -> bool:
    """True when the clause's only hypothetical cue is an English "if" after the value (a condition on a
    request, not a supposition about the user)."""
    head, tail = before + clause[:value_end], clause[value_end:]
    return not sentence_reasons(head) & {"hypothetical"} and bool(HYPOTHETICAL_EN_AFTER.search(tail)) and \
        not re.search(cjk_edges(r"如果|假如|假设|要是|万一|倘若|的话|就好了|\bwould\b|\bwish\b"), tail, re.IGNORECASE)


def allowed(field: str, why: Iterable[str]) -> bool:
    why = set(why)
    if why & {"hypothetical", "joke", "quote", "question", "reported", "others_family"}:
        return False
    if "third_party" in why and field not in FAMILY:
        return False
    if "other_person" in why and field in ("pets", "children"):
        return False
    if "negation" in why and field not in NEGATIVE_OK:
        return False
    if "not_identity" in why and field in IDENTITY_FIELDS:
        return False
    if "not_taste" in why and field in TASTE_FIELDS:
        return False
    if "idle_hobby" in why and field in TASTE_FIELDS:
        return False
    if "cannot" in why and field in CANNOT_BLOCKS:
        return False
    if "offer" in why and field in OFFER_BLOCKS:
        return False
    if "wish" in why and field in WISH_BLOCKS:
        return False
    if "past" in why and field in PAST_BLOCKS:
        return False
    if "event" in why and field in EVENT_BLOCKS:
        return False
    if "one_off" in why and field in LASTING_ONLY:
        return False
    if "laugh_nearby" in why and field in IRONY_PRONE:
        return False
    # a laugh in the clause makes a taste or a job ironic ("我最喜欢加班了哈哈"), not a name, place, date or brand said with
    # a smile ("大家都叫我胖虎哈哈", "Ikea is basically my whole apartment lol"); a joke word (开玩笑, jk) still takes it back
    return not ("laugh" in why and field in IRONY_PRONE)


def is_correction(text: str) -> bool:
    return CORRECTION.search(text) is not None
