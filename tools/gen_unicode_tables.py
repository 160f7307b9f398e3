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
Oniguruma use), else Python's own unicodedata. 
It also writes, between "BEGIN GENERATED NORMALIZATION TABLES" and "END GENERATED NORMALIZATION
TABLES", what Unicode normalization (UAX #15: NFC, NFD, NFKC, NFKD) needs, as two-level tables
(stage1[cp >> shift] names a block of stage2, blocks shared when equal):
  mg__nf_ccc       the canonical combining class of every code point;
  mg__nf_dec       per code point (offset << 10) | (dlen << 5) | klen, 0: no decomposition.
                   mg__nf_pool[offset…] holds the full canonical decomposition (dlen code points;
                   dlen 0: the code point itself) and then the full compatibility one (klen;
                   klen 0: the same as the canonical one), recursively expanded and canonically
                   ordered, as NFD and NFKD of that one code point give them. Hangul syllables
                   are left out: their decomposition is arithmetic;
  mg__nf_comp      the primary composites: (first, second, composite), sorted by (first, second),
                   without the composition exclusions (Full_Composition_Exclusion) and without
                   Hangul (arithmetic too).
Run:
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


def two_level(vals, ctype, name):
    """stage1[cp >> shift] * block + (cp & mask) indexes stage2; the shift with fewest bytes."""
    end = max(i for i, v in enumerate(vals) if v) + 1  # code points from here on are all 0
    vals = vals[:end]
    best = None
    for shift in range(4, 10):
        bs, blocks, s1, s2 = 1 << shift, {}, [], []
        for i in range(0, len(vals), bs):
            b = tuple(vals[i:i + bs])
            if b not in blocks:
                blocks[b] = len(s2) // bs
                s2.extend(b)
            s1.append(blocks[b])
        w2 = 1 if max(s2) < 256 else 2 if max(s2) < 65536 else 4
        w1 = 1 if max(s1) < 256 else 2
        size = len(s1) * w1 + len(s2) * w2
        if best is None or size < best[0]:
            best = (size, shift, s1, s2, w1)
    size, shift, s1, s2, w1 = best
    t1 = "uint8_t" if w1 == 1 else "uint16_t"
    out = ["#define %s_SHIFT %d" % (name.upper(), shift),
           "#define %s_END 0x%x /* 0 from here on */" % (name.upper(), end),
           "static const %s %s_1[%d] = {" % (t1, name, len(s1))] + rows(s1, 24, "%d,") + ["};"]
    out += ["static const %s %s_2[%d] = {" % (ctype, name, len(s2))] + rows(s2, 24, "%d,") + ["};"]
    return out, size


def rows(vals, per, fmt):
    """vals as C initializers, lines of at most 100 characters (per: unused, kept for callers)."""
    out, line = [], "   "
    for v in vals:
        item = fmt % v
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    if line.strip():
        out.append(line)
    return out


def is_hangul_syllable(cp):
    return 0xAC00 <= cp <= 0xD7A3


def normalization_tables():
    ccc = [ud.combining(chr(cp)) if not 0xD800 <= cp <= 0xDFFF else 0 for cp in range(0x110000)]
    dec, pool, where, ndec = [0] * 0x110000, [], {}, 0

    def put(seq):  # offset of seq in the pool, shared when already there
        if seq not in where:
            where[seq] = len(pool)
            pool.extend(seq)
        return where[seq]

    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or is_hangul_syllable(cp):
            continue
        c = chr(cp)
        d, k = ud.normalize("NFD", c), ud.normalize("NFKD", c)
        if d == c and k == c:
            continue
        ds = tuple(map(ord, d)) if d != c else ()
        ks = tuple(map(ord, k)) if k != d else ()
        assert len(ds) < 32 and len(ks) < 32
        dec[cp] = put(ds + ks) << 10 | len(ds) << 5 | len(ks)
        ndec += 1
    comp = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or is_hangul_syllable(cp):
            continue
        raw = ud.decomposition(chr(cp))
        if not raw or raw.startswith("<"):
            continue
        parts = [int(x, 16) for x in raw.split()]
        # a primary composite: a pair that NFC gives back (exclusions and non-starters do not)
        if len(parts) == 2 and ud.normalize("NFC", chr(cp)) == chr(cp):
            comp.append((parts[0], parts[1], cp))
    comp.sort()
    lines = ["/* BEGIN GENERATED NORMALIZATION TABLES by tools/gen_unicode_tables.py: Unicode %s."
             % ud.unidata_version,
             "   %d code points decompose, %d pool code points, %d primary composites. */"
             % (ndec, len(pool), len(comp))]
    t, size = two_level(ccc, "uint8_t", "mg__nf_ccc")
    lines += t
    t, size2 = two_level(dec, "uint32_t", "mg__nf_dec")
    lines += t
    lines += ["static const uint32_t mg__nf_pool[%d] = {" % len(pool)] + rows(pool, 16, "%d,") + ["};"]
    lines += ["static const uint32_t mg__nf_comp[%d][3] = {" % len(comp)]
    lines += rows(["{%d,%d,%d}," % c for c in comp], 8, "%s")
    lines += ["};", "/* END GENERATED NORMALIZATION TABLES */"]
    return lines, ndec, len(pool), len(comp)


def replace_between(src, begin, end, lines):
    b = next(i for i, l in enumerate(src) if begin in l)
    e = next(i for i, l in enumerate(src) if end in l)
    src[b:e + 1] = lines


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
    replace_between(src, "BEGIN GENERATED UNICODE TABLE", "END GENERATED UNICODE TABLE", lines)
    nlines, nrec, npool, ncomp = normalization_tables()
    replace_between(src, "BEGIN GENERATED NORMALIZATION TABLES", "END GENERATED NORMALIZATION TABLES", nlines)
    open(path, "w", encoding="utf-8").write("\n".join(src))
    print("%s: Unicode %s, %d table entries; normalization: %d decompose, %d pool code points, %d composites"
          % (path, ud.unidata_version, len(entries), nrec, npool, ncomp))


if __name__ == "__main__":
    main()
