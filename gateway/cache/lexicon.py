"""Word lists of the semantic-hit verifier (gateway/cache/verifier.py), English and Chinese."""

from __future__ import annotations

# ---- English -------------------------------------------------------------------------------------------------

EN_NEGATIONS = frozenset({
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "nowhere", "without", "cannot",
    "cant", "dont", "doesnt", "isnt", "arent", "wasnt", "werent", "wont", "didnt", "shouldnt", "couldnt",
})

EN_NUMBER_WORDS: dict[str, float] = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40,
    "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5, "twice": 2, "double": 2,
    "triple": 3,
}
EN_ONE_PRONOUN_BEFORE = frozenset({
    "which", "this", "that", "the", "each", "any", "every", "no", "some", "another", "other", "a", "an",
    "better", "best", "right", "good", "new", "old",
})
EN_ORDINALS: dict[str, float] = {
    "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9,
    "tenth": 10, "eleventh": 11, "twelfth": 12, "hundredth": 100,
}

_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
EN_DATE_WORDS: dict[str, str] = {
    **{m: f"month:{i + 1}" for i, m in enumerate(_MONTHS) if m != "may"},
    **{m[:3]: f"month:{i + 1}" for i, m in enumerate(_MONTHS) if m not in ("may", "march")},
    "sept": "month:9",
    **{d: f"weekday:{i}" for i, d in enumerate(_WEEKDAYS)},
    **{d[:3]: f"weekday:{i}" for i, d in enumerate(_WEEKDAYS) if d[:3] not in ("sat", "sun", "wed")},
    "today": "day:0", "tonight": "day:0", "tomorrow": "day:+1", "yesterday": "day:-1", "tmrw": "day:+1",
    "morning": "part:morning", "afternoon": "part:afternoon", "evening": "part:evening", "midnight": "part:night",
    "noon": "part:noon",
    "spring": "season:spring", "summer": "season:summer", "autumn": "season:autumn", "winter": "season:winter",
    "weekend": "unit:weekend", "weekday": "unit:weekday", "weekdays": "unit:weekday",
}
EN_MAY_MONTH_BEFORE = frozenset({"in", "of", "since", "until", "till", "by", "early", "late", "mid", "during",
                                 "next", "last", "this", "before", "after", "from", "to", "through"})
EN_DATE_UNITS: dict[str, str] = {
    "day": "day", "week": "week", "month": "month", "year": "year", "quarter": "quarter", "decade": "decade",
    "century": "century", "weekend": "weekend", "season": "season", "semester": "semester",
}
EN_RELATIVE: dict[str, str] = {
    "next": "next", "coming": "next", "upcoming": "next", "following": "next", "last": "last",
    "previous": "last", "past": "last", "prior": "last", "this": "this", "current": "this",
}

# Words whose presence changes what is asked for: quantifiers, superlatives, comparisons, direction.
_SCOPE_GROUPS: dict[str, tuple[str, ...]] = {
    "all": ("all", "every", "each", "entire", "whole", "everything", "everyone", "everybody"),
    "some": ("some", "several", "few", "any", "certain"),
    "only": ("only", "solely", "exclusively"),
    "most": ("most", "majority"),
    "least": ("least", "fewest", "minority"),
    "more": ("more", "greater", "higher", "larger", "bigger", "above", "exceeding", "exceed", "exceeds"),
    "less": ("less", "fewer", "lower", "smaller", "below"),
    "max": ("largest", "biggest", "highest", "maximum", "max", "greatest", "tallest", "longest", "heaviest"),
    "min": ("smallest", "lowest", "minimum", "min", "shortest", "lightest", "tiniest"),
    "best": ("best", "top"),
    "worst": ("worst",),
    "fast": ("fastest", "quickest"),
    "slow": ("slowest",),
    "cheap": ("cheapest",),
    "expensive": ("priciest",),
    "old": ("oldest", "earliest"),
    "new": ("newest", "latest", "youngest", "most recent"),
    "first": ("first", "initial"),
    "last": ("final",),
    "before": ("before", "prior"),
    "after": ("after",),
    "pro": ("pros", "advantages", "advantage", "benefits", "benefit", "upsides", "strengths"),
    "con": ("cons", "disadvantages", "disadvantage", "drawbacks", "drawback", "downsides", "weaknesses",
            "risks"),
    "increase": ("increase", "raise", "grow", "boost", "increases", "increasing"),
    "decrease": ("decrease", "reduce", "lower", "cut", "decreases", "reducing", "decreasing"),
    "buy": ("buy", "purchase", "buying"),
    "sell": ("sell", "selling"),
    "import": ("import", "imports"),
    "export": ("export", "exports"),
    "upload": ("upload",),
    "download": ("download",),
    "enable": ("enable", "activate", "turn on"),
    "disable": ("disable", "deactivate"),
    "encrypt": ("encrypt", "encryption"),
    "decrypt": ("decrypt", "decryption"),
    "include": ("including", "include", "includes"),
    "exclude": ("excluding", "exclude", "except", "excludes"),
    "north": ("north", "northern"),
    "south": ("south", "southern"),
    "east": ("east", "eastern"),
    "west": ("west", "western"),
    "male": ("male", "men", "man"),
    "female": ("female", "women", "woman"),
    "hot": ("hot", "warm"),
    "cold": ("cold", "cool"),
    "start": ("start", "begin", "starts", "begins"),
    "stop": ("stop", "end", "ends", "stops"),
    "add": ("add", "insert"),
    "remove": ("remove", "delete", "uninstall"),
    "install": ("install",),
}
EN_SCOPE: dict[str, str] = {w: group for group, words in _SCOPE_GROUPS.items() for w in words if " " not in w}

EN_NOT_ENTITIES = frozenset({"i", "i'm", "i've", "i'd", "i'll", "ok", "okay"})

# Sentence-initial capitalised words that are ordinary words, not names.
EN_COMMON_WORDS = frozenset("""
a an the and or but if so then than that this these those there here it its it's is are was were be been am
do does did doing done can could should would will shall may might must have has had having
what whats what's how how's why when where who whom whose which whats
i me my mine we us our you your yours he she him her his they them their
please tell give show list explain describe write find help make create generate recommend suggest
summarize summarise translate compare convert calculate compute define name get let lets let's provide
any some all every each no not never yes hi hello hey thanks thank dear
in on at for from to of by with about as into over under after before during between
best top good great quick short simple easy new old first last next
is are was were
should could would
suggest outline draft rewrite fix check identify fill sort count estimate plan prepare
one two three four five six seven eight nine ten
also just now today tomorrow yesterday tonight
compose tell draft create build design book set remind cancel schedule round split report search play send
read open close start stop use solve prove teach proofread edit improve optimize optimise debug implement
analyze analyse review evaluate predict guess imagine pretend describe brainstorm invent add remove delete
install uninstall update upgrade run go take put keep turn call look see watch learn study cook bake prepare
events prices recipes ideas tips steps ways reasons examples things people someone something anything
""".split())

# ---- Chinese -------------------------------------------------------------------------------------------------

ZH_NEGATIONS = ("不", "没", "无", "非", "别", "未", "勿", "莫", "否")

# Words that contain a negation character but negate nothing, taken out before counting.
ZH_NOT_NEGATION = (
    "非常", "特别", "区别", "分别", "别人", "别的", "告别", "类别", "级别", "性别", "识别", "离别", "差别",
    "未来", "是否", "能否", "可否", "否则", "不错", "不过", "不仅", "不但", "不同", "不断", "不少", "无论",
    "无线", "无人机", "并且", "莫名", "不管", "毫无疑问", "无数", "非洲", "阿拉伯", "无锡", "没关系",
)

ZH_DIGITS: dict[str, int] = {
    "零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9,
}
# Words that contain 一/万/千 but count nothing.
ZH_NUMERAL_IDIOMS = (
    "一下", "一些", "一起", "一样", "一直", "一定", "一般", "一点", "一切", "统一", "唯一", "万一", "一旦",
    "一边", "一致", "一共", "一向", "一方面", "千万", "万能", "一会", "一路", "一同", "同一", "一帆风顺",
    "一生", "一辈子", "一体", "第一",
)


def _longest_first(table: dict[str, str]) -> dict[str, str]:
    return dict(sorted(table.items(), key=lambda kv: -len(kv[0])))


_ZH_WEEKDAY_NAMES = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
ZH_DATES: dict[str, str] = _longest_first({
    "今天": "day:0", "今日": "day:0", "今晚": "day:0", "明天": "day:+1", "明日": "day:+1", "明晚": "day:+1",
    "昨天": "day:-1", "昨日": "day:-1", "昨晚": "day:-1", "后天": "day:+2", "前天": "day:-2",
    "今年": "this:year", "明年": "next:year", "去年": "last:year", "前年": "last2:year", "后年": "next2:year",
    "本周": "this:week", "这周": "this:week", "这个星期": "this:week", "上周": "last:week", "上个星期": "last:week",
    "下周": "next:week", "下个星期": "next:week", "本月": "this:month", "这个月": "this:month",
    "上个月": "last:month", "上月": "last:month", "下个月": "next:month", "下月": "next:month",
    "周末": "unit:weekend", "早上": "part:morning", "上午": "part:morning", "早晨": "part:morning",
    "中午": "part:noon", "下午": "part:afternoon", "傍晚": "part:evening", "晚上": "part:evening",
    "夜里": "part:night", "凌晨": "part:night", "春天": "season:spring", "夏天": "season:summer",
    "秋天": "season:autumn", "冬天": "season:winter", "春节": "holiday:spring", "中秋": "holiday:midautumn",
    "国庆": "holiday:national", "元旦": "holiday:newyear", "圣诞": "holiday:christmas",
    **{f"星期{k}": f"weekday:{v}" for k, v in _ZH_WEEKDAY_NAMES.items()},
    **{f"礼拜{k}": f"weekday:{v}" for k, v in _ZH_WEEKDAY_NAMES.items()},
    **{f"周{k}": f"weekday:{v}" for k, v in _ZH_WEEKDAY_NAMES.items() if k != "天"},
})

ZH_SCOPE: dict[str, str] = _longest_first({
    "所有": "all", "全部": "all", "每个": "all", "每一": "all", "一切": "all", "全都": "all",
    "一些": "some", "有些": "some", "部分": "some", "某些": "some", "几个": "some",
    "只有": "only", "仅仅": "only", "仅": "only", "只": "only",
    "最大": "max", "最高": "max", "最多": "max", "最长": "max", "最重": "max",
    "最小": "min", "最低": "min", "最少": "min", "最短": "min", "最轻": "min",
    "最好": "best", "最佳": "best", "最棒": "best", "最差": "worst", "最坏": "worst",
    "最快": "fast", "最慢": "slow", "最便宜": "cheap", "最贵": "expensive", "最早": "old", "最新": "new",
    "最近": "new", "第一": "first", "首个": "first", "最后": "last", "最终": "last",
    "超过": "more", "以上": "more", "大于": "more", "多于": "more", "高于": "more",
    "以下": "less", "少于": "less", "小于": "less", "低于": "less", "不到": "less",
    "之前": "before", "以前": "before", "之后": "after", "以后": "after",
    "优点": "pro", "好处": "pro", "优势": "pro", "缺点": "con", "坏处": "con", "劣势": "con", "风险": "con",
    "增加": "increase", "提高": "increase", "提升": "increase", "减少": "decrease", "降低": "decrease",
    "购买": "buy", "买": "buy", "出售": "sell", "卖": "sell", "进口": "import", "出口": "export",
    "上传": "upload", "下载": "download", "开启": "enable", "启用": "enable", "打开": "enable",
    "关闭": "disable", "禁用": "disable", "包括": "include", "包含": "include", "除了": "exclude",
    "排除": "exclude", "北方": "north", "南方": "south", "东部": "east", "西部": "west", "男性": "male",
    "女性": "female", "加密": "encrypt", "解密": "decrypt", "安装": "install", "卸载": "remove",
    "删除": "remove", "添加": "add",
})

# Question words and politeness that change no answer; removed before the substitution check so that
# 如何/怎么/怎样 or 请问/麻烦 count as the same request.
ZH_NEUTRAL = tuple(sorted((
    "请问", "请", "麻烦", "帮我", "帮忙", "能否", "可以", "能不能", "可不可以", "你能", "你可以", "告诉我", "我想知道",
    "我想", "想知道", "一下", "怎么样", "怎么", "如何", "怎样", "什么", "啥", "哪些", "哪个", "吗", "呢", "吧",
    "呀", "啊", "的", "了", "是", "和", "与", "及", "跟", "谢谢", "介绍", "说说", "讲讲", "讲解", "解释", "说明",
    "简单", "详细", "具体", "有", "做", "要", "应该", "需要", "得", "地", "我", "你", "在", "会", "能",
    "一个", "哪里", "哪儿", "为什么", "为何", "方法", "步骤", "办法", "吗？", "给我", "列出", "推荐",
), key=len, reverse=True))
