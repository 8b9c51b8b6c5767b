#!/usr/bin/env python3
"""Generate corpus.jsonl: varied texts with their token counts from OpenAI's Python tiktoken.

Each line is {"kind": ..., "text": ..., "cl100k_base": n, "o200k_base": n} where n is
len(enc.encode_ordinary(text)) (special-token strings count as ordinary text, as the pricer
does). The corpus is deterministic (seeded); regenerate with the project's virtualenv:

    .venv/bin/python internal/tiktoken/testdata/gen_corpus.py

tiktoken downloads vocabularies by default and this machine cannot reach those hosts, so the
encodings are built from the .tiktoken files embedded in github.com/pkoukk/tiktoken-go-loader
(found in the Go module cache with `go list -m`), checked against the SHA-256 that tiktoken
itself expects, and paired with tiktoken's own definitions (pattern, special tokens) from
tiktoken_ext.openai_public. Nothing here is copied from tiktoken.
"""
import json
import os
import random
import subprocess
import sys

import tiktoken
import tiktoken.load
import tiktoken_ext.openai_public as openai_public

HERE = os.path.dirname(os.path.abspath(__file__))


def loader_dir():
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "github.com/pkoukk/tiktoken-go-loader"],
        cwd=HERE, check=True, capture_output=True, text=True,
    ).stdout.strip()
    if not out:
        sys.exit("gen_corpus: tiktoken-go-loader not in the module cache; run `go mod download`")
    return os.path.join(out, "assets")


def encodings():
    assets = loader_dir()

    def local(url, expected_hash=None):
        # Same file name as the URL, read locally; tiktoken verifies expected_hash.
        return tiktoken.load.load_tiktoken_bpe(os.path.join(assets, os.path.basename(url)), expected_hash)

    openai_public.load_tiktoken_bpe = local
    return {
        "cl100k_base": tiktoken.Encoding(**openai_public.cl100k_base()),
        "o200k_base": tiktoken.Encoding(**openai_public.o200k_base()),
    }


PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Budgets are shared across the fleet, so an estimate that is too low lets everyone overshoot.",
    "Dr. Smith's patients weren't happy; they'd waited 3 hours (and 45 minutes) in the lobby!",
    "In 1969, Apollo 11 landed on the Moon: \"That's one small step for man...\"",
    "Please summarise the following document in three bullet points, keeping the tone neutral.",
    "She said, 'I'll be there by 5:30 p.m.' -- but nobody believed her.",
    "Naïve café owners in Zürich serve crème brûlée to façade-loving tourists.",
    "URLs like https://example.com/a/b?c=d&e=f#g appear in prompts more often than you think.",
    "E-mail me at someone@example.org or call +1 (555) 010-9999 ext. 42.",
    "You're an assistant that answers in JSON. Don't add commentary; we've parsed it before.",
    "THE REPORT IS DUE ON MONDAY. ALL CAPS SENTENCES ARE STILL TEXT.",
    "camelCaseIdentifiers, snake_case_names and kebab-case-words mix in technical writing.",
    "Weird    spacing\tand\ttabs\n\n\nand blank lines\r\nwith CRLF endings.\r\n",
]

CODE = [
    'func main() {\n\tfmt.Println("hello, world")\n}\n',
    "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "const xs = [1, 2, 3].map((x) => x * 2).filter(Boolean);\n// comment\n",
    "SELECT id, name FROM users WHERE created_at > NOW() - INTERVAL '7 days' ORDER BY id DESC;",
    "#include <stdio.h>\nint main(void){printf(\"%d\\n\", 42);return 0;}\n",
    "    if err != nil {\n        return fmt.Errorf(\"bucket: eval: %w\", err)\n    }\n",
    "<div class=\"row\"><span id='x'>&nbsp;&lt;tag&gt;</span></div>\n",
    "fn add(a: i32, b: i32) -> i32 { a + b } // 0x1F, 0b1010, 1_000_000",
    "$ curl -sS -H 'Authorization: Bearer sk-...' https://api.example.com/v1/models | jq .",
    "    /// Doc comment\n    pub struct Foo<'a> { bar: &'a str }\n",
]

JSONS = [
    '{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":16}',
    '{\n  "name": "get_weather",\n  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}\n}',
    '[1,2,3,{"a":null,"b":true,"c":[false,-1.5e10]}]',
    '{"emoji":"\\ud83d\\ude00","escaped":"line\\nbreak\\t\\"quote\\""}',
]

EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🏳️‍🌈", "❤️", "🤖", "🧑🏿‍💻", "✨", "🔥", "🙂", "🚀", "🪐", "🫠"]
CJK = [
    "我们在北京的时候参观了故宫和长城。",
    "今日はとても良い天気ですね。散歩に行きましょう！",
    "한국어 문장은 띄어쓰기를 사용합니다. 안녕하세요?",
    "東京都渋谷区、カタカナとひらがなと漢字が混ざる。",
    "人工智能正在改变世界，但我们需要谨慎。",
]
OTHER_SCRIPTS = [
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "नमस्ते दुनिया, आप कैसे हैं? यह हिंदी पाठ है।",
    "Привет, мир! Как дела? Ёлка и щука.",
    "Γειά σου Κόσμε· αλφάβητο ΑΒΓΔ.",
    "שלום עולם, מה שלומך?",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง",
    "ሰላም ልዑል",
    "Xin chào thế giới, tiếng Việt có dấu.",
    "ǅemal ǈiljana ǋegoš ʰʲ ʼ",  # titlecase (Lt) and modifier (Lm) letters
    "e\u0301 a\u0300\u0323 n\u0303 \u0301\u0301x \u0301ABC \u0301",  # combining marks, alone and leading
    "Ⅻ ⅷ ½ ² ³ ① ٣٤٥ ४५६ ๓๔",  # other numbers
]
# Characters of Unicode 16.0 (new since 15.0): Go's unicode package is 15.0.0, tiktoken's
# regex engine is 16.0; the tokenizer uses tables generated from tiktoken (gen_unicode.py),
# so these must match too.
UNICODE16 = ["\u1c89\u1c8a", "\ua7cb\ua7cc\ua7cd", "\U00010d40\U00010d41\U00010d4a", "x\u0897y",
             "\U00010d50\U00010d70", "\U000105c0\U000105c1 \U00016d40abc"]
CONTRACTIONS = ["I'm", "you're", "YOU'RE", "we've", "they'd", "it's", "don't", "we'LL", "x'S", "'s",
                "'ſ", "Iſ'ſ", "'ve'", "''re", "rock'n'roll", "O'Neill's", "'T", "'D", "'M'm"]
SPECIALS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|endofprompt|>", "<|im_start|>"]
WS = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085", "\x0b", "\x0c"]
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have "
         "from or one had by word but not what all were we when your can said there use an each "
         "which she do how their if will up other about out many then them these so some her "
         "would make like him into time has look two more write go see number no way could people "
         "Token Budget Envoy LIMIT Request gpt o200k cl100k naïve Straße résumé").split()


def rand_words(rng, n):
    out = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.1:
            w = w.upper()
        elif r < 0.2:
            w = w.capitalize()
        out.append(w)
        out.append(rng.choice([" ", " ", " ", ", ", ". ", "\n", "  ", "'s ", "! "]))
    return "".join(out)


def rand_unicode(rng, n):
    pools = [
        "abcXYZ", "0123456789", " \t\n\r", "!?.,;:'\"/\\-_()[]{}<>@#$%^&*+=|~`",
        "".join(EMOJI), "".join(CJK), "".join(OTHER_SCRIPTS), "".join(UNICODE16),
        "\u0301\u0300\u0327\u0903\u093f", "ǅǈʰʲⅫ½²", "\u00a0\u3000\u2028\u0085",
        "'sStTdDmMlLvVrReE", "ſ",
    ]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(n))


def texts():
    rng = random.Random(20240603)
    out = []

    def add(kind, t):
        out.append((kind, t))

    for s in PROSE:
        add("prose", s)
    for s in CODE:
        add("code", s)
    for s in JSONS:
        add("json", s)
    for s in CJK + OTHER_SCRIPTS:
        add("script", s)
    for s in UNICODE16:
        add("unicode16", s)
    for s in CONTRACTIONS:
        add("contraction", s)
        add("contraction", "He said " + s + " then")
    for s in SPECIALS:
        add("special", s)
        add("special", "text " + s + " more" + s)
    for e in EMOJI:
        add("emoji", e)
        add("emoji", "ok " + e * 3 + "!")
    for w in WS:
        for k in (1, 2, 3, 7):
            add("whitespace", w * k)
            add("whitespace", "a" + w * k + "b")
            add("whitespace", "word" + w * k)
            add("whitespace", w * k + "word")
            add("whitespace", "x" + w * k + "!")
    for n in (1, 2, 3, 4, 5, 7, 10, 17, 40):
        add("digits", "7" * n)
        add("digits", "".join(rng.choice("0123456789") for _ in range(n)))
        add("digits", "v" + "1" * n + "x")
    for n in (2, 5, 16, 47, 48, 49, 64, 100, 257, 1000, 3000):
        add("long", "a" * n)
        add("long", " " * n)
        add("long", "\n" * n)
        add("long", "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)))
        add("long", "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(n)))
        add("long", "中" * n if n < 1000 else "".join(rng.choice(CJK[0] + CJK[4]) for _ in range(n)))
        add("long", "!" * n)
        add("long", "😀" * (n // 4 + 1))
    for _ in range(250):
        add("words", rand_words(rng, rng.randint(1, 80)))
    for _ in range(150):
        parts = [rng.choice(PROSE + CODE + JSONS + CJK + OTHER_SCRIPTS + EMOJI + CONTRACTIONS + SPECIALS + WS)
                 for _ in range(rng.randint(2, 8))]
        add("mix", rng.choice(["", " ", "\n"]).join(parts))
    for _ in range(300):
        add("random", rand_unicode(rng, rng.randint(1, 60)))
    for _ in range(60):
        add("camel", "".join(rng.choice(WORDS).capitalize() if rng.random() < 0.7 else rng.choice(WORDS).upper()
                             for _ in range(rng.randint(1, 8))))
    return out


def main():
    encs = encodings()
    path = os.path.join(HERE, "corpus.jsonl")
    items = texts()
    with open(path, "w", encoding="utf-8") as f:
        for kind, t in items:
            row = {"kind": kind, "text": t}
            for name, enc in encs.items():
                row[name] = len(enc.encode_ordinary(t))
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print("gen_corpus: wrote %d texts to %s (tiktoken %s)" % (len(items), path, tiktoken.__version__), file=sys.stderr)


if __name__ == "__main__":
    main()
