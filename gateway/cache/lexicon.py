"""Word lists of the semantic-hit verifier (gateway/cache/verifier.py), English and Chinese."""

from __future__ import annotations

# ---- English -------------------------------------------------------------------------------------------------

EN_NEGATIONS = frozenset({
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "nowhere", "without", "cannot", "non",
    "cant", "dont", "doesnt", "isnt", "arent", "wasnt", "werent", "wont", "didnt", "shouldnt", "couldnt",
    "havent", "hasnt", "hadnt", "wouldnt", "aint", "mustnt", "neednt", "mightnt", "shant",
})

# Verbs that negate the verb after their "to": "fails to pay" / "doesn't pay", "forgot to attach" / "didn't
# attach", "failure to file" / "not filing". Without a "to" they are no negation ("fail the exam" is an axis).
EN_NEGATING_VERBS = frozenset({
    "fail", "fails", "failed", "failing", "failure", "refusal", "neglect", "neglects", "neglected", "neglecting",
    "forget", "forgets", "forgot", "forgotten", "forgetting",
})
# Verbs that negate with or without a "to": "decline overtime" asks what "refuse to work overtime" does. A
# "decline to" before a number, a currency or an article is a fall ("shares declined to 1.2"), no negation.
EN_REFUSING_VERBS = frozenset({
    "refuse", "refuses", "refused", "refusing", "decline", "declines", "declined", "declining",
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

# Qualifiers: a word of one of these groups in one text must be matched by the same group in the other
# ("all" vs "some", "full-time employees" vs "employees", "cheapest" vs "best"). Hyphens are dropped before
# lookup ("full-time" -> "fulltime").
_QUALIFIER_GROUPS: dict[str, tuple[str, ...]] = {
    "all": ("all", "every", "each", "entire", "whole", "everything", "everyone", "everybody"),
    "some": ("some", "several", "few", "certain"),
    "only": ("only", "solely", "exclusively"),
    "most": ("most", "majority", "mostly"),
    "least": ("least", "fewest", "minority"),
    "max": ("largest", "biggest", "highest", "maximum", "max", "greatest", "tallest", "longest", "heaviest",
            "deepest", "strongest", "richest", "hottest", "warmest", "widest", "loudest"),
    "min": ("smallest", "lowest", "minimum", "min", "shortest", "lightest", "tiniest", "weakest", "poorest",
            "coldest", "coolest", "narrowest", "quietest", "thinnest"),
    "best": ("best", "top", "finest"),
    "worst": ("worst",),
    "fast": ("fastest", "quickest"),
    "slow": ("slowest",),
    "cheap": ("cheapest",),
    "expensive": ("priciest", "costliest"),
    "old": ("oldest", "earliest", "eldest"),
    "new": ("newest", "latest", "youngest"),
    "near": ("closest", "nearest"),
    "far": ("farthest", "furthest", "remotest"),
    "first": ("first", "initial", "1st"),
    "last": ("final", "lastly"),
    "pro": ("pros", "advantages", "advantage", "benefits", "benefit", "upsides", "strengths", "merits"),
    "con": ("cons", "disadvantages", "disadvantage", "drawbacks", "drawback", "downsides", "weaknesses",
            "risks", "dangers"),
    "fulltime": ("fulltime", "full time"),
    "parttime": ("parttime", "part time"),
    "annual": ("annual", "annually", "yearly", "perannum"),
    "monthly": ("monthly",),
    "weekly": ("weekly",),
    "daily": ("daily",),
    "hourly": ("hourly",),
    "domestic": ("domestic", "inland"),
    "international": ("international", "overseas", "abroad", "foreign", "global", "worldwide"),
    "gross": ("gross", "pretax"),
    "net": ("net", "aftertax", "takehome"),
    "north": ("north", "northern"),
    "south": ("south", "southern"),
    "east": ("east", "eastern"),
    "west": ("west", "western"),
    "male": ("male", "men", "boys"),
    "female": ("female", "women", "girls"),
    "adult": ("adult", "adults", "grownup", "grownups"),
    "child": ("child", "children", "kid", "kids", "toddler", "toddlers", "baby", "babies", "infant",
              "infants", "newborn", "newborns", "teenager", "teenagers", "minor", "minors"),
    "pregnant": ("pregnant", "pregnancy", "breastfeeding", "nursing"),
    "senior": ("pensioner", "pensioners", "retiree", "retirees"),
    "include": ("including", "include", "includes", "inclusive"),
    "exclude": ("excluding", "exclude", "except", "excludes", "exclusive"),
    "free": ("free",),
    "paid": ("paid", "premium", "paying"),
}
EN_QUALIFIERS: dict[str, str] = {w: group for group, words in _QUALIFIER_GROUPS.items() for w in words}
# Groups that answer the same slot: between rewordings only a different member of one family is a conflict
# ("all" vs "some"), while a qualifier one rewording leaves out is often just wording.
QUALIFIER_FAMILY: dict[str, str] = {
    **dict.fromkeys(("all", "some", "only", "most", "least"), "quantity"),
    **dict.fromkeys(("max", "min", "best", "worst", "fast", "slow", "cheap", "expensive", "old", "new", "near",
                     "far"), "extreme"),
    **dict.fromkeys(("first", "last"), "rank"), **dict.fromkeys(("pro", "con"), "procon"),
    **dict.fromkeys(("fulltime", "parttime"), "employment"),
    **dict.fromkeys(("annual", "monthly", "weekly", "daily", "hourly"), "period"),
    **dict.fromkeys(("domestic", "international"), "region"), **dict.fromkeys(("gross", "net"), "pay"),
    **dict.fromkeys(("north", "south", "east", "west"), "compass"), **dict.fromkeys(("male", "female"), "sex"),
    **dict.fromkeys(("adult", "child", "pregnant", "senior"), "population"), **dict.fromkeys(("include", "exclude"), "inclusion"),
    **dict.fromkeys(("free", "paid"), "price"),
}

# How something went, said with a manner adverb right after the verb ("went well" / "went badly"): the axis
# "outcome" below; "well" alone is too common a word ("as well", "well, ...") to take a side.
_OUTCOME_VERBS = ("go", "goes", "went", "gone", "going", "do", "does", "did", "done", "doing", "work", "works",
                  "worked", "working", "perform", "performs", "performed", "performing")
# Polar axes: two opposite sides. A pair is rejected when one text takes a side of an axis the other text
# contradicts ("before" vs "after", "turn on" vs "disable"); a side present in one text only is wording
# ("How do I stop X" vs "How do I get rid of X"). Two-word entries are matched on adjacent words.
_POLAR_AXES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "compare": (("more", "greater", "higher", "larger", "bigger", "above", "over", "exceed", "exceeds",
                 "exceeding", "beyond", "longer", "taller", "heavier", "wider", "plus"),
                ("less", "fewer", "lower", "smaller", "below", "under", "beneath", "shorter", "lighter",
                 "narrower", "minus")),
    "age": (("older", "elder", "old", "senior", "seniors", "elderly"), ("younger", "young", "junior", "youth")),
    "time": (("after", "later", "afterwards", "since"), ("before", "earlier", "prior", "until", "beforehand")),
    "price": (("expensive", "pricier", "costly", "costlier", "luxury"), ("cheap", "cheaper", "inexpensive",
                                                                         "budget", "lowcost")),
    "speed": (("fast", "faster", "quick", "quicker", "rapid", "speed up"), ("slow", "slower", "slow down")),
    "temperature": (("hot", "hotter", "warm", "warmer", "heat", "heating"), ("cold", "colder", "cool", "cooler",
                                                                            "cooling", "freeze", "freezing")),
    "distance": (("near", "nearby", "close to", "closer"), ("far", "farther", "further", "distant")),
    "size": (("big", "large", "huge", "bigger"), ("small", "tiny", "smaller")),
    "length": (("long",), ("short",)),
    "weight": (("heavy",), ("light", "lightweight")),
    "brightness": (("dark", "darker", "darken"), ("light", "bright", "brighter", "brighten")),
    "run": (("start", "begin", "starts", "begins", "starting", "launch", "resume"),
            ("stop", "end", "ends", "stops", "stopping", "finish", "quit", "pause", "halt", "terminate")),
    "open": (("open", "opens", "opened", "opening", "unlock"), ("close", "closes", "closed", "closing", "shut",
                                                               "lock", "locked")),
    "switch": (("enable", "enabled", "activate", "turn on", "switch on", "switched on", "turned on"),
               ("disable", "disabled", "deactivate", "turn off", "switch off", "switched off", "turned off")),
    "amount": (("increase", "raise", "grow", "boost", "increases", "increasing", "gain", "maximize",
                "maximise", "add", "more of"),
               ("decrease", "reduce", "cut", "decreases", "reducing", "decreasing", "lose", "minimize",
                "minimise", "drop", "lower")),
    "trade": (("buy", "purchase", "buying", "bought", "buyer"), ("sell", "selling", "sold", "seller")),
    "flow": (("import", "imports", "upload", "uploads", "inbound", "incoming", "input"),
             ("export", "exports", "download", "downloads", "outbound", "outgoing", "output")),
    "transfer": (("receive", "received", "receiving"), ("send", "sent", "sending")),
    "crypt": (("encrypt", "encryption", "encode", "compress", "zip"), ("decrypt", "decryption", "decode",
                                                                         "decompress", "unzip")),
    "install": (("install", "installing", "add", "insert", "create"), ("uninstall", "remove", "delete",
                                                                      "uninstalling", "removing", "deleting")),
    "win": (("win", "won", "winning", "winner", "pass", "passed", "success", "succeed"),
            ("lose", "lost", "losing", "loser", "fail", "failed", "failure")),
    "truth": (("true", "correct", "right", "valid", "positive", "pros"), ("false", "wrong", "incorrect",
                                                                         "invalid", "negative", "cons")),
    "allow": (("allow", "allowed", "permit", "permitted", "accept", "accepted", "approve", "approved", "grant",
               "granted", "include"),
              ("forbid", "forbidden", "ban", "banned", "prohibit", "prohibited", "reject", "rejected",
               "refuse", "refused", "block", "blocked", "exclude", "decline", "declined", "deny", "denied")),
    "arrive": (("arrive", "arrival", "arrivals", "arriving", "land", "landing"),
               ("depart", "departure", "departures", "departing", "leave", "takeoff")),
    "rise": (("rise", "rises", "rising", "up", "upward", "ascend"), ("fall", "falls", "falling", "down",
                                                                   "downward", "descend")),
    "difficulty": (("easy", "easier", "easiest", "simple", "simpler"), ("hard", "harder", "hardest",
                                                                        "difficult", "complex")),
    "strength": (("strong", "stronger"), ("weak", "weaker")),
    "wealth": (("rich", "richer", "wealthy"), ("poor", "poorer")),
    "safety": (("safe", "safer", "safest", "harmless", "nontoxic"), ("dangerous", "unsafe", "risky", "harmful",
                                                                   "toxic", "poisonous")),
    "health": (("healthy", "healthier", "good for"), ("unhealthy", "bad for", "harmful")),
    "quality": (("good", "better"), ("bad", "worse")),
    "mood": (("happy", "happier", "happiness"), ("sad", "sadder", "sadness", "unhappy")),
    "wet": (("wet", "humid", "damp"), ("dry", "drier", "arid")),
    "push": (("push", "pushes"), ("pull", "pulls")),
    "left": (("left",), ("right",)),
    "in": (("inside", "indoor", "indoors", "interior"), ("outside", "outdoor", "outdoors", "exterior")),
    "max": (("max", "maximum", "upper"), ("min", "minimum", "lower")),
    "first": (("first", "earliest", "beginning"), ("last", "latest", "final", "ending")),
    "top": (("top",), ("bottom",)),
    "front": (("front", "forward", "forwards"), ("back", "backward", "backwards", "rear")),
    "plus": (("add", "plus", "sum", "multiply", "times"), ("subtract", "minus", "divide", "divided")),
    "sex": (("male", "men", "man", "boys", "boy", "husband", "father", "son", "brother", "he", "his"),
            ("female", "women", "woman", "girls", "girl", "wife", "mother", "daughter", "sister", "she", "her")),
    "gain": (("profit", "profits", "income", "revenue", "credit"), ("loss", "losses", "expense", "expenses",
                                                                  "cost", "debit")),
    "love": (("love", "loves", "favorite", "favourite"), ("hate", "hates", "dislike", "dislikes")),
    "into": (("into",), ("out of",)),
    "login": (("log in", "login", "sign in", "signin", "logged in", "signed in", "opt in", "log on", "plug in"),
              ("log out", "logout", "sign out", "signout", "logged out", "signed out", "opt out", "log off",
               "unplug")),
    "outcome": (tuple(f"{v} {adv}" for v in _OUTCOME_VERBS for adv in ("well", "smoothly")),
                tuple(f"{v} {adv}" for v in _OUTCOME_VERBS for adv in ("badly", "poorly", "wrong"))),
}
# Axes whose words are rare and specific enough that taking opposite sides is a different question even
# between loose rewordings (upload / download); the others count only between close texts.
STRONG_AXES = frozenset({"flow", "crypt", "install", "trade", "switch", "arrive", "allow", "login",
                         "change", "pace",  # verifier._changes: a change asked for, up or down
                         "course", "outcome",  # verifier._course: a trouble eased or made worse; went well / badly
                         "hardness", "density", "thickness", "depth", "width", "girth", "length", "size",
                         "wetness", "brightness", "tightness", "rank", "salary"})  # the last: _ZH_STATES
# Persons of pronouns: who does what to whom ("she sends me" / "I send her") between close texts. "you" is
# left out: "can you ..." is a way of asking, not a party.
EN_PERSON: dict[str, int] = {**dict.fromkeys(("i", "me", "my", "mine", "myself", "we", "us", "our", "ours"), 1),
                             **dict.fromkeys(("he", "him", "his", "she", "her", "hers", "they", "them", "their",
                                              "theirs"), 3)}
EN_POLAR: dict[str, tuple[tuple[str, int], ...]] = {}
for _axis, (_plus, _minus) in _POLAR_AXES.items():
    for _side, _words in ((1, _plus), (-1, _minus)):
        for _w in _words:
            EN_POLAR[_w] = (*EN_POLAR.get(_w, ()), (_axis, _side))

# What a question asks for. Between close texts another kind is another question ("How long does shipping
# take?" / "How much does shipping cost?").
EN_ASKS: dict[str, str] = {
    "how long": "duration", "how many": "count", "how much": "amount", "how often": "frequency",
    "how far": "distance", "how old": "age", "how big": "size", "how fast": "speed", "what time": "time",
    "how come": "reason", "how": "manner", "when": "time", "where": "place", "who": "person", "whom": "person", "whose": "person", "why": "reason",
}

# Prefixes that negate the word they are put on: "legal" / "illegal", "able" / "unable", "smoking" /
# "non-smoking" (hyphens are dropped before the comparison).
EN_NEGATING_PREFIXES = ("non", "un", "in", "im", "ir", "il", "dis", "ab", "mal")

# Words between two swapped terms that make the relation symmetric: "X and Y", "X vs Y", "between X and Y".
EN_SYMMETRIC = frozenset({"and", "or", "vs", "versus", "v", "with", "between", "compare", "compared", "the",
                          "a", "an", "&", "plus", "nor", "both", "either", "neither"})
# Predicates that hold both ways, written "X <word> with Y": "Does Spotify work with Alexa" asks what "Does Alexa
# work with Spotify" does. "come with", "pay with", "replace with" are not.
EN_RECIPROCAL = frozenset({
    "compatible", "incompatible", "work", "interact", "connect", "pair", "sync", "mix", "match", "combine",
    "clash", "conflict", "interfere", "interchangeable", "marry", "friends", "live", "play", "fight", "argue",
})
# Words that make the order of two terms matter: "from X to Y", "X than Y", "convert X into Y".
EN_DIRECTIONAL = frozenset({"to", "from", "into", "than", "over", "under", "before", "after", "by", "for",
                            "onto", "towards", "toward", "then", "above", "below", "beat", "beats", "defeat",
                            "defeated", "against", "per", "in", "of", "divided", "minus", "exceed", "exceeds",
                            "becomes", "become", "replace", "replaced", "instead", "->", "=>"})

# Units next to a number: compared in context ("5 km" vs "5 miles").
EN_UNITS: dict[str, str] = {
    **{u: "km" for u in ("km", "kms", "kilometer", "kilometers", "kilometre", "kilometres")},
    **{u: "mile" for u in ("mi", "mile", "miles")},
    **{u: "m" for u in ("m", "meter", "meters", "metre", "metres")},
    **{u: "cm" for u in ("cm", "centimeter", "centimeters", "centimetre", "centimetres")},
    **{u: "mm" for u in ("mm", "millimeter", "millimeters", "millimetre", "millimetres")},
    **{u: "ft" for u in ("ft", "foot", "feet")},
    **{u: "in" for u in ("inch", "inches")},
    **{u: "kg" for u in ("kg", "kgs", "kilo", "kilos", "kilogram", "kilograms")},
    **{u: "g" for u in ("g", "gram", "grams", "gr")},
    **{u: "lb" for u in ("lb", "lbs", "pound", "pounds")},
    **{u: "oz" for u in ("oz", "ounce", "ounces")},
    **{u: "l" for u in ("l", "liter", "liters", "litre", "litres")},
    **{u: "ml" for u in ("ml", "milliliter", "milliliters", "millilitre", "millilitres")},
    **{u: "cup" for u in ("cup", "cups")},
    **{u: "s" for u in ("s", "sec", "secs", "second", "seconds")},
    **{u: "min" for u in ("min", "mins", "minute", "minutes")},
    **{u: "h" for u in ("h", "hr", "hrs", "hour", "hours")},
    **{u: "day" for u in ("day", "days")},
    **{u: "week" for u in ("week", "weeks", "wk", "wks")},
    **{u: "month" for u in ("month", "months")},
    **{u: "year" for u in ("year", "years", "yr", "yrs")},
    **{u: "usd" for u in ("usd", "dollar", "dollars", "$", "bucks")},
    **{u: "eur" for u in ("eur", "euro", "euros", "€")},
    **{u: "gbp" for u in ("gbp", "£", "quid")},
    **{u: "yen" for u in ("yen", "jpy", "¥", "rmb", "yuan", "cny")},
    **{u: "c" for u in ("c", "°c", "celsius", "centigrade")},
    **{u: "f" for u in ("f", "°f", "fahrenheit")},
    **{u: "gb" for u in ("gb", "gigabyte", "gigabytes")},
    **{u: "mb" for u in ("mb", "megabyte", "megabytes")},
    **{u: "tb" for u in ("tb", "terabyte", "terabytes")},
    **{u: "percent" for u in ("%", "percent", "per cent", "pct")},
    **{u: "mph" for u in ("mph",)},
    **{u: "kmh" for u in ("kmh", "kph")},
}

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

# Words of EN_COMMON_WORDS that name the action asked about, not the way of asking: "How do I read a file" /
# "... write a file", "how to plan a wedding" / "... cancel a wedding" are other questions. The rest of
# EN_COMMON_WORDS (tell, give, show, explain, find, make, ...) only asks and may change between rewordings.
EN_ACTIONS = frozenset("""
read open close start stop solve prove teach proofread edit improve optimize optimise debug implement analyze
analyse review evaluate predict invent add remove delete install uninstall update upgrade run call watch learn
study cook bake prepare book remind cancel schedule round split report search play send fix check identify
fill sort count estimate plan convert
""".split())
# Verbs that ask for the same action, each group read as its first word when two texts are compared.
_SYNONYM_GROUPS = (
    ("check", "see", "view", "look", "find", "show", "verify", "tell"),
    ("fix", "repair", "solve", "resolve", "troubleshoot"),
    ("make", "create", "build", "generate", "produce", "write", "compose"),
    ("convert", "turn", "transform"),
    ("learn", "study", "master"),
    ("book", "reserve", "schedule"),
    ("edit", "change", "modify", "alter", "adjust"),
    ("pick", "choose", "select"),
    ("set", "setup", "configure"),
    ("call", "phone", "ring"),
    ("speak", "talk"),
    ("get", "obtain", "receive"),
    ("improve", "boost", "enhance"),
    ("cook", "prepare"),
    ("compute", "calculate"),
    ("stop", "quit"),
    ("cancel", "terminate"),
)
EN_SYNONYMS: dict[str, str] = {}
for _group in _SYNONYM_GROUPS:
    for _w in _group:
        EN_SYNONYMS.setdefault(_w, _group[0])

# ---- Chinese -------------------------------------------------------------------------------------------------

ZH_NEGATIONS = ("不", "没", "无", "非", "别", "未", "勿", "莫", "否")
# Characters without a negation character that negate what follows as 不 / 没 do: 公司拒绝支付 / 公司不给,
# 缺钙 / 缺乏钙质 / 没有钙, 签证被拒了 / 签证被拒绝了 (拒绝 is also the "allow" axis; the count is read before
# axis words are blanked). Counted one character each, so 缺 and 缺乏 are one negation.
ZH_NEGATING_WORDS = ("缺", "拒")
# Words with such a character that negate nothing (缺点 is a qualifier, not "lacks a point").
ZH_NOT_NEGATING_WORDS = ("缺点", "缺陷", "抗拒")

# Words that contain a negation character but negate nothing, taken out before counting.
ZH_NOT_NEGATION = (
    "非常", "特别", "区别", "分别", "别人", "别的", "告别", "类别", "级别", "性别", "识别", "离别", "差别",
    "未来", "是否", "能否", "可否", "否则", "不错", "不过", "不仅", "不但", "不同", "不断", "不少", "无论",
    "无线", "无人机", "并且", "莫名", "不管", "毫无疑问", "无数", "非洲", "阿拉伯", "无锡", "没关系",
    "必不可少", "不可或缺", "不可缺少",  # "indispensable": a double negation, which asserts
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

ZH_QUALIFIERS: dict[str, str] = _longest_first({
    "所有": "all", "全部": "all", "每个": "all", "每一": "all", "一切": "all", "全都": "all",
    "一些": "some", "有些": "some", "部分": "some", "某些": "some", "几个": "some",
    "只有": "only", "仅仅": "only", "仅": "only", "只": "only",
    "最大": "max", "最高": "max", "最多": "max", "最长": "max", "最重": "max", "最深": "max", "最热": "max",
    "最小": "min", "最低": "min", "最少": "min", "最短": "min", "最轻": "min", "最浅": "min", "最冷": "min",
    "最好": "best", "最佳": "best", "最棒": "best", "最差": "worst", "最坏": "worst",
    "最快": "fast", "最慢": "slow", "最便宜": "cheap", "最贵": "expensive", "最早": "old", "最新": "new",
    "最远": "far", "离得最近": "near", "最接近": "near", "最近的": "near",
    "第一": "first", "首个": "first", "最后": "last", "最终": "last",
    "优点": "pro", "好处": "pro", "优势": "pro", "缺点": "con", "坏处": "con", "劣势": "con", "风险": "con",
    "全职": "fulltime", "兼职": "parttime", "国内": "domestic", "国际": "international", "海外": "international",
    "出国": "international", "每年": "annual", "年度": "annual", "每月": "monthly", "每个月": "monthly",
    "每周": "weekly", "每天": "daily", "每日": "daily", "税前": "gross", "税后": "net",
    "男性": "male", "男生": "male", "女性": "female", "女生": "female", "儿童": "child", "孩子": "child",
    "小孩": "child", "婴儿": "child", "宝宝": "child", "成人": "adult", "成年人": "adult", "孕妇": "pregnant",
    "怀孕": "pregnant", "哺乳期": "pregnant", "老人": "senior", "老年人": "senior", "免费": "free",
    "付费": "paid", "收费": "paid", "北方": "north", "南方": "south", "东部": "east", "西部": "west",
    "包括": "include", "包含": "include", "除了": "exclude", "排除": "exclude",
})

# Opposite sides of an axis (see EN_POLAR): rejected only when the two texts take opposite sides.
ZH_POLAR: dict[str, tuple[str, int]] = _longest_first({  # type: ignore[arg-type]
    **{w: ("compare", 1) for w in ("超过", "以上", "大于", "多于", "高于", "更多", "更大", "更高", "超出")},
    # not 不到 / 不足: "收不到" is a negation, and a negation is counted as one
    **{w: ("compare", -1) for w in ("以下", "少于", "小于", "低于", "更少", "更小", "更低")},
    **{w: ("time", -1) for w in ("之前", "以前", "前的", "提前", "早于")},
    **{w: ("time", 1) for w in ("之后", "以后", "后的", "晚于", "延后")},
    **{w: ("age", 1) for w in ("年长", "老年", "老人", "年纪大")},
    **{w: ("age", -1) for w in ("年轻", "青年", "年纪小")},
    **{w: ("amount", 1) for w in ("增加", "提高", "提升", "增长", "上涨", "涨")},
    **{w: ("amount", -1) for w in ("减少", "降低", "下降", "下跌", "跌", "缩减")},
    **{w: ("trade", 1) for w in ("购买", "买入", "买")},
    **{w: ("trade", -1) for w in ("出售", "卖出", "卖")},
    "进口": ("flow", 1), "出口": ("flow", -1), "上传": ("flow", 1), "下载": ("flow", -1),
    "收到": ("flow", 1), "发送": ("flow", -1), "输入": ("flow", 1), "输出": ("flow", -1),
    **{w: ("switch", 1) for w in ("开启", "启用", "打开", "开通", "激活", "开了", "开着", "开机")},
    **{w: ("switch", -1) for w in ("关闭", "禁用", "关掉", "停用", "取消", "关了", "关着", "关机")},
    "加密": ("crypt", 1), "解密": ("crypt", -1), "压缩": ("crypt", 1), "解压": ("crypt", -1),
    **{w: ("install", 1) for w in ("安装", "添加", "新增", "创建")},
    **{w: ("install", -1) for w in ("卸载", "删除", "移除")},
    "开始": ("run", 1), "启动": ("run", 1), "停止": ("run", -1), "结束": ("run", -1), "暂停": ("run", -1),
    "热": ("temperature", 1), "冷": ("temperature", -1), "近": ("distance", 1), "远": ("distance", -1),
    "快": ("speed", 1), "慢": ("speed", -1), "贵": ("price", 1), "便宜": ("price", -1),
    "容易": ("difficulty", 1), "简单": ("difficulty", 1), "难": ("difficulty", -1), "困难": ("difficulty", -1),
    "赢": ("win", 1), "输": ("win", -1), "成功": ("win", 1), "失败": ("win", -1),
    "到达": ("arrive", 1), "抵达": ("arrive", 1), "出发": ("arrive", -1), "离开": ("arrive", -1),
    "上升": ("rise", 1), "下降趋势": ("rise", -1), "左": ("left", 1), "右": ("left", -1),
    "男": ("sex", 1), "女": ("sex", -1), "丈夫": ("sex", 1), "妻子": ("sex", -1), "老公": ("sex", 1),
    "老婆": ("sex", -1), "父亲": ("sex", 1), "母亲": ("sex", -1), "爸爸": ("sex", 1), "妈妈": ("sex", -1),
    "室内": ("in", 1), "室外": ("in", -1), "户外": ("in", -1),
    "好": ("quality", 1), "坏": ("quality", -1), "健康": ("health", 1), "有害": ("health", -1),
    "安全": ("safety", 1), "危险": ("safety", -1), "优点多": ("quality", 1),
    "盈利": ("gain", 1), "收入": ("gain", 1), "利润": ("gain", 1), "亏损": ("gain", -1), "支出": ("gain", -1),
    "成本": ("gain", -1), "正确": ("truth", 1), "错误": ("truth", -1), "对": ("truth", 1), "错": ("truth", -1),
    "允许": ("allow", 1), "可以": ("allow", 1), "禁止": ("allow", -1), "不许": ("allow", -1), "接受": ("allow", 1), "拒绝": ("allow", -1),
    "乘": ("plus", 1), "加": ("plus", 1), "除": ("plus", -1), "减": ("plus", -1),
})
# States said with one character whose opposite is one character (太硬 / 太软, 变厚 / 变薄). The bare characters
# are in too many compounds (硬盘 / 软件, 深圳, 长城, 大学) to be read alone, so they count only after a word of
# degree or change, or in a two-character word that means the state; opposite states are another question in
# any wording (strong axes).
_ZH_DEGREE = ("太", "很", "变", "偏", "较", "更", "挺", "越来越", "特别", "有点", "过于", "变得")
_ZH_STATES: dict[str, tuple[str, str, tuple[str, ...], tuple[str, ...]]] = {
    "hardness": ("硬", "软", ("坚硬", "僵硬", "硬邦邦"), ("柔软", "松软", "软乎乎", "软化")),
    "density": ("密", "稀", ("浓密", "茂密", "稠密", "浓稠", "粘稠"), ("稀疏", "稀少", "稀薄")),
    "thickness": ("厚", "薄", ("加厚",), ("削薄",)),
    "depth": ("深", "浅", (), ()),
    "width": ("宽", "窄", ("宽敞",), ("狭窄",)),
    "girth": ("胖", "瘦", ("长胖", "发胖", "肥胖", "增肥", "增重"), ("消瘦", "减肥", "减重", "瘦身")),
    "length": ("长", "短", ("拉长", "延长"), ("缩短",)),
    "size": ("大", "小", ("放大", "扩大"), ("缩小",)),
    "wetness": ("湿", "干", ("潮湿",), ("干燥",)),
    "brightness": ("亮", "暗", ("调亮", "明亮"), ("调暗", "昏暗")),
    "tightness": ("紧", "松", ("拧紧", "收紧"), ("拧松", "松动")),
    "rank": ("", "", ("升职", "晋升", "提拔", "升级"), ("降职", "降级", "贬职")),
    "salary": ("", "", ("加薪", "涨薪", "涨工资"), ("降薪", "减薪", "扣工资")),
}
ZH_STATE_AXES = frozenset(_ZH_STATES)
_ZH_STATE_WORDS: dict[str, tuple[str, int]] = {}
for _axis, (_plus_char, _minus_char, _plus_words, _minus_words) in _ZH_STATES.items():
    for _side, _char, _words in ((1, _plus_char, _plus_words), (-1, _minus_char, _minus_words)):
        _ZH_STATE_WORDS.update(dict.fromkeys(_words, (_axis, _side)))
        if _char:
            _ZH_STATE_WORDS.update({f"{d}{_char}": (_axis, _side) for d in _ZH_DEGREE})
            if _char not in "大小长短干":  # 长大了, 长了痘, 干了什么: other senses
                _ZH_STATE_WORDS[f"{_char}了"] = (_axis, _side)
ZH_POLAR = _longest_first({**_ZH_STATE_WORDS, **ZH_POLAR})  # type: ignore[arg-type]  # the axes above win

# Characters that mark a direction between two terms (从 X 到 Y, X 比 Y, 把 X 换成 Y).
ZH_DIRECTIONAL = ("从", "到", "比", "兑", "转成", "换成", "转换", "变成", "给", "向", "往", "对")
# Characters between two exchanged terms that make the exchange a change of roles (父亲的遗产女儿 / 女儿的遗产
# 父亲, 成都在重庆的西边 / 重庆在成都的西边); 和 / 与 / 跟 join terms symmetrically and are not among them.
ZH_RELATION = frozenset("的在兑到比给向往对能连转把从用换")

# What a Chinese question asks for, as EN_ASKS (多久 / 多少钱); every key found in the text counts.
ZH_ASKS: dict[str, str] = {
    "多久": "duration", "多长时间": "duration", "多少钱": "amount", "多少": "amount", "几个": "count",
    "几次": "frequency", "多远": "distance", "多大": "size", "几岁": "age", "什么时候": "time", "几点": "time",
    "哪里": "place", "哪儿": "place", "在哪": "place", "谁": "person", "为什么": "reason", "为何": "reason",
}

# Question words and politeness that change no answer; removed before the substitution check so that
# 如何/怎么/怎样 or 请问/麻烦 count as the same request.
ZH_NEUTRAL = tuple(sorted((
    "请问", "请", "麻烦", "帮我", "帮忙", "能否", "可以", "能不能", "可不可以", "你能", "你可以", "告诉我", "我想知道",
    "我想", "想知道", "一下", "怎么样", "怎么", "如何", "怎样", "什么", "啥", "哪些", "哪个", "吗", "呢", "吧",
    "呀", "啊", "的", "了", "是", "和", "与", "及", "跟", "还是", "或者", "以及", "谢谢", "介绍", "说说", "讲讲",
    "讲解", "解释", "说明", "简单", "详细", "具体", "有", "做", "要", "应该", "需要", "得", "地", "我", "你", "在",
    "会", "能",
    "一个", "哪里", "哪儿", "为什么", "为何", "方法", "步骤", "办法", "吗？", "给我", "列出", "推荐",
), key=len, reverse=True))

# For the leading-topic check (verifier._cjk_topic_substituted): words that neither name a topic nor tell two
# topics apart (what a question asks for, prepositions, modals, pronouns, degree words), taken out of the two
# leading chunks before they are compared, so 几点可以入住 / 什么时候能办入住 keeps no topic of its own.
ZH_TOPIC_NEUTRAL = tuple(sorted({*ZH_ASKS, "用", "把", "被", "给", "对于", "对", "坐", "去", "到", "从", "上", "里",
                                 "中", "想", "就", "都", "也", "还", "再", "又", "这", "那", "些", "种", "个", "多",
                                 "几", "哪", "该", "才", "很", "最", "请", "您", "他", "她", "它", "们", "咱", "可",
                                 "以", "过", "着",
                                 # time words and forum openers: wording before the topic, not a topic
                                 # (最近老是失眠 / 这段时间总失眠, 小白提问：/ 新手求助，, 医生你好 / 大夫)
                                 "现在", "目前", "最近", "近来", "这段时间", "这阵子", "老是", "总是", "小白",
                                 "新手", "各位", "大家", "你好", "医生", "大夫", "求助", "提问", "请教", "老", "总"},
                                key=len, reverse=True))
# Topics said two ways, folded before the topic rule compares leading chunks (飞机延误 / 航班延误), and
# traditional characters folded to simplified (貓咪可以吃巧克力嗎 / 猫能不能吃巧克力): the same topic.
ZH_TOPIC_FOLD = str.maketrans({"貓": "猫", "嗎": "吗", "麼": "么", "書": "书", "車": "车", "電": "电", "腦": "脑",
                               "機": "机", "們": "们", "這": "这", "裡": "里", "為": "为", "會": "会", "說": "说",
                               "時": "时", "間": "间", "過": "过", "還": "还", "個": "个", "醫": "医",
                               "藥": "药", "錢": "钱", "買": "买", "賣": "卖", "寶": "宝", "貝": "贝", "飛": "飞",
                               "鳥": "鸟", "魚": "鱼", "馬": "马", "東": "东", "語": "语", "學": "学", "習": "习"})
ZH_TOPIC_SYNONYMS = (("飞机", "航班"),)


# Characters a Chinese request starts with when it starts with its verb (申请退款, 查看容器, 修改密码, 吃头孢):
# the verb is said many ways (申请 / 办理, 修改 / 更改, 吃 / 服用), so a leading chunk starting with one is
# wording, not a topic put for another.
ZH_VERB_START = frozenset("查申办修更改看想吃服用打找买卖开关做学写读下换退取存转交去来要求问入")

# Named things of one class, any one of which can stand in a question where another stood ("read a file in
# python" / "... in java", "pay with visa" / "... mastercard", 北京 / 上海). Users type them lower-case, so
# capitalisation cannot find them; a text naming one member that the other text lacks while the other names
# a different member of the same class asks about another thing, however the rest was reworded. Each entry is
# one thing: its spellings separated by "|" (the first is its id). Words with a common other sense ("go",
# "rust", "swift", "apple", "pound", "edge", "word", "node", "teams") are left out or spelt in full.
# Names with a common other sense ("c" a grade or vitamin, "go" the verb, "rust" on iron, "r" a letter),
# read as the name only right before a noun of its kind ("a C function", "Go code", "R script", "C 语言"):
# (class, id of the thing, the nouns of its kind).
_CODE_NOUNS = ("code", "program", "programs", "programming", "function", "functions", "library", "libraries",
               "script", "scripts", "compiler", "extension", "extensions", "module", "modules", "programmer",
               "programmers", "developer", "developers", "project", "projects", "source", "binding", "bindings",
               "api", "header", "headers", "struct", "structs", "pointer", "pointers", "package", "packages",
               "语言", "代码", "程序", "函数", "库", "脚本")
NAMED_BEFORE_NOUN: dict[str, tuple[str, str, frozenset[str]]] = {
    "c": ("language", "c", frozenset(_CODE_NOUNS)),
    "go": ("language", "golang", frozenset(_CODE_NOUNS)),
    "rust": ("language", "rust", frozenset(_CODE_NOUNS)),
    "swift": ("language", "swift", frozenset(_CODE_NOUNS)),
    "r": ("language", "r", frozenset(_CODE_NOUNS)),
}

ENTITY_CLASSES: dict[str, tuple[str, ...]] = {
    "language": (
        "python|py", "java", "javascript|js", "typescript|ts", "golang", "c++|cpp", "c#|csharp", "ruby",
        "php", "kotlin", "scala", "perl", "haskell", "elixir", "erlang", "lua", "matlab", "fortran", "cobol",
        "dart", "julia", "bash", "powershell", "objective-c", "clojure", "sql", "html", "css",
    ),
    "framework": (
        "react|reactjs", "vue|vuejs", "angular", "svelte", "django", "flask", "fastapi", "rails", "laravel",
        "nextjs|next.js", "pandas", "numpy", "pytorch", "tensorflow", "jquery",
        "bootstrap", "tailwind", "nodejs|node.js", "deno", "excel", "powerpoint",
        "mysql", "postgres|postgresql", "mongodb|mongo", "redis", "sqlite", "elasticsearch",
    ),
    "platform": (
        "windows", "macos|mac|osx|mac os", "linux", "ubuntu", "debian", "fedora", "android|安卓",
        "ios", "iphone|苹果手机", "ipad", "chromebook", "playstation|ps5|ps4", "xbox", "nintendo switch",
        "kindle", "huawei|华为", "xiaomi|小米", "samsung|三星",
    ),
    "browser": ("chrome", "firefox", "safari", "microsoft edge", "opera gx"),
    # airports of one city are put one for another ("flying into Heathrow" / "from Gatwick into central
    # London"); names of no other common sense only (no "lax", "midway", "newark": a word, a city)
    "airport": ("heathrow", "gatwick", "stansted", "luton airport", "jfk", "laguardia", "o'hare|ohare", "dulles",
                "charles de gaulle|cdg", "orly", "schiphol", "narita", "haneda", "incheon", "changi"),
    "app": (
        "gmail", "outlook", "whatsapp", "telegram", "wechat|微信", "alipay|支付宝", "qq", "taobao|淘宝",
        "zoom", "slack", "microsoft teams", "skype", "discord", "netflix", "spotify", "youtube", "instagram", "facebook",
        "tiktok|抖音", "twitter", "linkedin", "dropbox", "icloud", "onedrive", "google drive", "github",
        "gitlab", "bitbucket", "docker", "kubernetes|k8s", "aws", "azure", "gcp", "weibo|微博",
    ),
    "payment": (
        "visa", "mastercard", "amex|american express", "paypal", "venmo", "apple pay", "google pay",
        "bitcoin|btc", "ethereum|eth", "stripe", "zelle",
    ),
    "currency": (
        "usd|dollar|dollars|美元", "eur|euro|euros|欧元", "gbp|sterling|英镑", "jpy|yen|日元",
        "cny|rmb|yuan|人民币", "hkd|港币", "chf|swiss franc", "inr|rupee|rupees", "cad", "aud", "krw|won|韩元",
    ),
    "drug": (
        "ibuprofen|advil|motrin|布洛芬", "paracetamol|acetaminophen|tylenol|扑热息痛|对乙酰氨基酚",
        "aspirin|阿司匹林", "naproxen|aleve", "amoxicillin|阿莫西林", "metformin", "omeprazole",
        "melatonin|褪黑素", "codeine", "prednisone", "loratadine|claritin", "cetirizine|zyrtec",
    ),
    "country": (
        "usa|united states|america|美国", "uk|united kingdom|britain|england|英国", "canada|加拿大",
        "mexico|墨西哥", "france|法国", "germany|德国", "spain|西班牙", "portugal|葡萄牙", "italy|意大利",
        "netherlands|holland|荷兰", "belgium|比利时", "switzerland|瑞士", "austria|奥地利", "sweden|瑞典",
        "norway|挪威", "denmark|丹麦", "finland|芬兰", "ireland|爱尔兰", "scotland", "poland|波兰",
        "greece|希腊", "türkiye|土耳其", "russia|俄罗斯", "ukraine|乌克兰", "china|中国", "japan|日本",
        "korea|south korea|韩国", "india|印度", "thailand|泰国", "vietnam|越南", "singapore|新加坡",
        "malaysia|马来西亚", "indonesia|印尼|印度尼西亚", "philippines|菲律宾", "australia|澳大利亚|澳洲",
        "new zealand|新西兰", "brazil|巴西", "argentina|阿根廷", "chile|智利", "peru|秘鲁", "colombia",
        "egypt|埃及", "morocco|摩洛哥", "south africa|南非", "kenya", "nigeria", "israel|以色列",
        "uae|dubai|迪拜|阿联酋", "saudi arabia|沙特", "iran|伊朗", "iraq|伊拉克", "pakistan|巴基斯坦",
    ),
    "city": (
        "london|伦敦", "paris|巴黎", "berlin|柏林", "madrid|马德里", "rome|罗马", "amsterdam|阿姆斯特丹",
        "brussels", "vienna|维也纳", "prague|布拉格", "munich|慕尼黑", "barcelona|巴塞罗那", "lisbon",
        "dublin", "new york|nyc|纽约", "los angeles|洛杉矶", "san francisco|旧金山", "chicago|芝加哥",
        "boston|波士顿", "seattle|西雅图", "toronto|多伦多", "vancouver|温哥华", "sydney|悉尼",
        "melbourne|墨尔本", "tokyo|东京", "osaka|大阪", "kyoto|京都", "seoul|首尔", "bangkok|曼谷",
        "beijing|北京", "shanghai|上海", "guangzhou|广州", "shenzhen|深圳", "hong kong|香港", "taipei|台北",
        "hangzhou|杭州", "nanjing|南京", "suzhou|苏州", "chengdu|成都", "chongqing|重庆", "wuhan|武汉",
        "xian|xi'an|西安", "tianjin|天津", "macau|macao|澳门", "moscow|莫斯科", "istanbul|伊斯坦布尔",
        "mumbai", "delhi", "cairo", "mexico city", "edinburgh", "manchester",
        "shijiazhuang|石家庄", "zhengzhou|郑州", "changsha|长沙", "jinan|济南", "qingdao|青岛", "xiamen|厦门",
        "fuzhou|福州", "kunming|昆明", "harbin|哈尔滨", "shenyang|沈阳", "dalian|大连", "hefei|合肥",
        "nanchang|南昌", "nanning|南宁", "guiyang|贵阳", "lanzhou|兰州", "taiyuan|太原", "lhasa|拉萨",
        "urumqi|乌鲁木齐", "haikou|海口", "sanya|三亚", "zhuhai|珠海", "dongguan|东莞", "foshan|佛山",
        "ningbo|宁波", "wuxi|无锡",
    ),
    # Common nouns of one kind that users put one for another ("can dogs eat grapes" / "are grapes toxic to
    # cats", 孕妇能喝咖啡吗 / 怀孕期间能喝茶吗). Chinese spellings are found inside other words, so only words
    # that are not part of common other words: no 铁 (地铁), 米 (厘米, 小米), 面 (方面), 酒 (酒店), 金 (现金);
    # the rarer other words are in ZH_NOT_NAMED. A thing of two kinds is listed in both with one id
    # ("chicken": an animal and a food), so it is swapped with either kind's members.
    "animal": (
        "cat|cats|kitten|kittens|猫|猫咪|小猫", "dog|dogs|puppy|puppies|狗|狗狗|小狗", "rabbit|rabbits|兔子",
        "hamster|hamsters|仓鼠", "horse|horses|马匹", "cow|cows|奶牛", "pig|pigs", "sheep|绵羊",
        "chicken|chickens|hen|hens|母鸡", "duck|ducks|鸭子", "parrot|parrots|鹦鹉", "snake|snakes|蛇",
        "turtle|turtles|tortoise|乌龟", "goldfish|金鱼", "elephant|elephants|大象", "giraffe|长颈鹿",
        "lion|lions|狮子", "tiger|tigers|老虎", "bear|bears|熊", "panda|熊猫", "whale|whales|鲸鱼",
        "shark|sharks|鲨鱼", "dolphin|dolphins|海豚", "bee|bees|蜜蜂", "mosquito|mosquitoes|蚊子",
    ),
    "food": (
        "banana|bananas|香蕉", "grape|grapes|葡萄", "strawberry|strawberries|草莓", "orange|oranges|橙子",
        "watermelon|西瓜", "mango|mangoes|芒果", "pineapple|菠萝|凤梨", "peach|peaches|桃子", "pear|pears|梨",
        "cherry|cherries|樱桃", "lemon|lemons|柠檬", "avocado|avocados|牛油果", "blueberry|blueberries|蓝莓",
        "tomato|tomatoes|西红柿|番茄", "potato|potatoes|土豆", "carrot|carrots|胡萝卜", "onion|onions|洋葱",
        "garlic|大蒜", "spinach|菠菜", "broccoli|西兰花", "cucumber|cucumbers|黄瓜", "mushroom|mushrooms|蘑菇",
        "rice|米饭|大米", "noodles|面条", "bread|面包", "pasta|意面", "oats|oatmeal|燕麦", "quinoa",
        "egg|eggs|鸡蛋", "cheese|奶酪", "yogurt|yoghurt|酸奶", "tofu|豆腐", "chocolate|巧克力",
        "peanut|peanuts|花生", "honey|蜂蜜", "beef|牛肉", "pork|猪肉", "lamb|羊肉", "chicken|chicken breast|鸡肉",
        "salmon|三文鱼", "tuna|金枪鱼", "shrimp|prawns|虾", "lobster|龙虾", "crab|crabs|螃蟹",
        "oyster|oysters|生蚝", "lentils|扁豆",
    ),
    "drink": (
        "coffee|咖啡", "tea|茶", "green tea|绿茶", "milk tea|bubble tea|奶茶", "milk|牛奶", "soy milk|豆浆",
        "beer|啤酒", "wine|red wine|红酒|葡萄酒", "whisky|whiskey|威士忌", "baijiu|白酒", "juice|果汁",
        "cola|coke|可乐", "energy drink|energy drinks|功能饮料",
    ),
    "organ": (
        "liver|肝|肝脏", "kidney|kidneys|肾|肾脏", "heart|心脏", "lung|lungs|肺", "stomach|胃",
        "brain|大脑", "skin|皮肤", "eye|eyes|眼睛", "ear|ears|耳朵", "tooth|teeth|牙齿|牙", "knee|knees|膝盖",
        "ankle|ankles|脚踝", "wrist|wrists|手腕", "shoulder|shoulders|肩膀", "spine|脊柱", "thyroid|甲状腺",
        "pancreas|胰腺", "bladder|膀胱", "colon|结肠", "prostate|前列腺",
    ),
    "tongue": (
        "english|英语|英文", "chinese|mandarin|中文|汉语|普通话", "cantonese|粤语", "spanish|西班牙语",
        "french|法语", "german|德语", "japanese|日语", "korean|韩语", "italian|意大利语",
        "portuguese|葡萄牙语", "russian|俄语", "arabic|阿拉伯语", "hindi", "dutch",
    ),
    "dynasty": ("秦朝", "汉朝", "唐朝", "宋朝", "元朝", "明朝", "清朝", "隋朝", "晋朝", "商朝", "周朝"),
    "sport": (
        "soccer|football|足球", "basketball|篮球", "tennis|网球", "baseball|棒球", "volleyball|排球",
        "badminton|羽毛球", "table tennis|ping pong|乒乓球", "golf|高尔夫", "swimming|游泳",
        "cricket", "rugby|橄榄球", "hockey|冰球", "cycling|骑行", "running|跑步", "yoga|瑜伽",
    ),
}

# Chinese words that contain a spelling of ENTITY_CLASSES and name something else: the walk over a text reads
# them whole and finds no thing there (熊孩子 is no bear, 茶几 no tea, 面包车 no bread, 熊市 a falling market).
ZH_NOT_NAMED: tuple[str, ...] = (
    "熊孩子", "熊市", "茶几", "面包车", "虾皮", "猫眼", "胃口", "肾上腺", "牙买加", "牙签", "蛇皮袋",
)

# Traditional characters folded to simplified before a Chinese text is verified (高鐵票怎麼退 / 高铁票怎么退,
# iPhone 無法開機 / 无法开机): the same question written in the other script, whose negations (無), question
# words (麼, 嗎) and nouns the rules would otherwise read as other characters. Only characters whose simplified
# form is one character with no other reading here (no 著 / 着, 乾 / 干, 後 / 后 is safe: 后 is not read apart).
ZH_TRADITIONAL = str.maketrans(
    "無們這裡為會說時間過還個醫藥錢買賣寶貝飛鳥魚馬東語學習貓嗎麼書車電腦機鐵開關門問題區號線網頁"
    "後來對應該讓給從發經濟價錢話請謝麗愛場幾種樣點單雙歲員聯繫終結現實際體驗產業務專業邊進運動"
    "國際氣頭髮臉錶鐘壞變熱冷涼溫濕燥檢查證書記錄確認據說讀寫聽見視覺辦處理歸還轉帳戶銀卡費"
    "補償則條規劃計劃報銷稅級優惠預約訂購買賣貨運輸遞郵寄離職辭職將從業執照駕駛導航態圖畫圓傳"
    "遠近長張紅綠藍黃黑顏鮮嚴興奮擔憂懷孕嬰兒雞鴨豬龍鳳蟲蝦麵飯飲餐廳廚師鍋爐燒煉煙霧響聲樂"
    "層樓窗戶牆壁燈亮暗擊強與當傷痛癢瘡藥療復發錯誤選擇沒於腳鍵碼權維護險衛華雲歡續簽參團灣陸臺罰誰"
    "讓嗎啟們賬蘋閉損壓審殺隨陽陰",
    "无们这里为会说时间过还个医药钱买卖宝贝飞鸟鱼马东语学习猫吗么书车电脑机铁开关门问题区号线网页"
    "后来对应该让给从发经济价钱话请谢丽爱场几种样点单双岁员联系终结现实际体验产业务专业边进运动"
    "国际气头发脸表钟坏变热冷凉温湿燥检查证书记录确认据说读写听见视觉办处理归还转帐户银卡费"
    "补偿则条规划计划报销税级优惠预约订购买卖货运输递邮寄离职辞职将从业执照驾驶导航态图画圆传"
    "远近长张红绿蓝黄黑颜鲜严兴奋担忧怀孕婴儿鸡鸭猪龙凤虫虾面饭饮餐厅厨师锅炉烧炼烟雾响声乐"
    "层楼窗户墙壁灯亮暗击强与当伤痛痒疮药疗复发错误选择没于脚键码权维护险卫华云欢续签参团湾陆台罚谁"
    "让吗启们账苹闭损压审杀随阳阴",
)

# The state a Chinese text says something is in now, one character after a word of degree (太瘦, 很硬, 有点松;
# not 变 / 越来越, which say a change): two texts saying opposite states (太瘦了想增肥 / 太胖了想减肥) ask opposite
# things even when each also names the other side as its goal.
_ZH_DEGREE_NOW = ("太", "很", "偏", "较", "挺", "特别", "有点", "过于", "太过")
ZH_STATE_NOW: dict[str, tuple[str, int]] = _longest_first({  # type: ignore[arg-type]
    f"{d}{char}": (axis, side)
    for axis, (plus, minus, _, _) in _ZH_STATES.items()
    for side, char in ((1, plus), (-1, minus)) if char
    for d in _ZH_DEGREE_NOW
})
