#!/usr/bin/env python3
"""tools/gen_unicode_tables.py — regenerates the Unicode category table inside mg_tokenizer.h.

The pre-tokenization regular expressions of tiktoken and Hugging Face tokenizers use \\p{L},
\\p{Lu}, \\p{Ll}, \\p{Lt}, \\p{Lm}, \\p{Lo}, \\p{N}, \\p{M} and \\s. This script writes, between the
lines "BEGIN GENERATED UNICODE TABLE" and "END GENERATED UNICODE TABLE" of mg_tokenizer.h, one
uint32 per boundary where the set of those classes changes: (first code point << 8) | flags,
flags = Lu 1, Ll 2, Lt 4, Lm 8, Lo 16, N 32, M 64, White_Space 128. The entry holds until the
next entry's first code point.

The Unicode version is the one of the `unicodedata2` package when it is installed (the install
step pins unicodedata2==16.0.0: the version tiktoken 0.14's Rust regex and tokenizers 0.23's
Oniguruma use), else Python's own unicodedata. Run:
    .venv/bin/python tools/gen_unicode_tables.py mg_tokenizer.h
"""
import sys
try:
    import unicodedata2 as ud
except ImportError:
    import unicodedata as ud

# White_Space (PropList.txt); unchanged since Unicode 6.3, and unicodedata has no accessor.
WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
               (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
               (0x3000, 0x3000)]
BITS = {"Lu": 1, "Ll": 2, "Lt": 4, "Lm": 8, "Lo": 16, "Nd": 32, "Nl": 32, "No": 32,
        "Mn": 64, "Mc": 64, "Me": 64}


def flags(cp):
    f = BITS.get(ud.category(chr(cp)), 0)
    if any(a <= cp <= b for a, b in WHITE_SPACE):
        f |= 128
    return f


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "mg_tokenizer.h"
    entries, prev = [], -1
    for cp in range(0x110000):
        f = flags(cp)
        if f != prev:
            entries.append((cp << 8) | f)
            prev = f
    lines = ["/* BEGIN GENERATED UNICODE TABLE by tools/gen_unicode_tables.py: Unicode %s, %d entries."
             % (ud.unidata_version, len(entries)),
             "   (first code point << 8) | flags (Lu 1, Ll 2, Lt 4, Lm 8, Lo 16, N 32, M 64, White_Space 128). */",
             "#define MG__UNICODE_VERSION \"%s\"" % ud.unidata_version,
             "static const uint32_t mg__uni_table[%d] = {" % len(entries)]
    row = []
    for e in entries:
        row.append("0x%x," % e)
        if len(row) == 10:
            lines.append("    " + "".join(row))
            row = []
    if row:
        lines.append("    " + "".join(row))
    lines.append("};")
    lines.append("/* END GENERATED UNICODE TABLE */")
    src = open(path, encoding="utf-8").read().split("\n")
    b = next(i for i, l in enumerate(src) if "BEGIN GENERATED UNICODE TABLE" in l)
    e = next(i for i, l in enumerate(src) if "END GENERATED UNICODE TABLE" in l)
    src[b:e + 1] = lines
    open(path, "w", encoding="utf-8").write("\n".join(src))
    print("%s: Unicode %s, %d table entries" % (path, ud.unidata_version, len(entries)))


if __name__ == "__main__":
    main()
