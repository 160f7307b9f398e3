#!/usr/bin/python3
"""Peer of bench/data.c: Megatron's index shuffles done by numpy itself, same sizes.

    /usr/bin/python3 bench/data_numpy.py --c build/data [bench/data.c options...]

Runs the C benchmark, reads its "data NAME VALUE UNIT" lines, then times what Megatron's
GPTDataset does with numpy for the same sizes: RandomState(seed).shuffle of the int32 document
index (epochs x sequences) and of the uint32 sample shuffle index (best of 3). Megatron's sample
index itself is built by C++ (helpers.cpp, not installed here), so the numpy column covers the
two shuffles only while ours covers shuffles + sample index. Prints both side by side.
"""
import subprocess
import sys
import time

import numpy


def main():
    args = sys.argv[1:]
    exe = "build/data"
    if "--c" in args:
        i = args.index("--c")
        exe = args[i + 1]
        del args[i:i + 2]
    out = subprocess.run([exe] + args, check=True, capture_output=True, text=True).stdout
    ours = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "data":
            ours[parts[1]] = (float(parts[2]), parts[3])
    n_doc = int(ours["index_doc_entries"][0])
    n_samples = int(ours["index_samples"][0])
    best = 1e30
    for _ in range(3):
        doc = numpy.arange(n_doc, dtype=numpy.int32)
        shuf = numpy.arange(n_samples, dtype=numpy.uint32)
        t0 = time.perf_counter()
        rng = numpy.random.RandomState(1234)
        rng.shuffle(doc)
        rng.shuffle(shuf)
        best = min(best, time.perf_counter() - t0)
    print("%-22s %14s  %s" % ("measurement", "mg_data.h", "numpy (Megatron's shuffles)"))
    for name, (value, unit) in ours.items():
        peer = "%.2f ms" % (1e3 * best) if name == "index_build" else ""
        print("%-22s %10g %-6s %s" % (name, value, unit, peer))


if __name__ == "__main__":
    main()
