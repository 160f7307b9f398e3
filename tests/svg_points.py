"""svg_points.py SVG — the points an mg_plot picture (megatron.h's mg_plot_jsonl) shows, read
back as a person reading the axes would: the file is parsed by an XML parser
(xml.etree.ElementTree: it must be well-formed XML), and every vertex of every curve is mapped
from pixels back to (iteration, value) through its panel's axes (the panel's data-* attributes:
pixel box, value ranges, log10 or linear). Prints one line per point,
    KEY ITERATION VALUE TOLERANCE
where TOLERANCE is what the picture's 0.01-pixel rounding allows in VALUE; and one line per
panel, "panel TITLE log|linear". Used by tests/test_plot.c."""
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == NS + "svg", root.tag
for g in root.iter(NS + "g"):
    if g.get("class") != "panel":
        continue
    x0, x1, y0, y1 = (float(g.get("data-" + k)) for k in ("x0", "x1", "y0", "y1"))
    xmin, xmax, ymin, ymax = (float(g.get("data-" + k)) for k in ("xmin", "xmax", "ymin", "ymax"))
    log = g.get("data-log") == "1"
    print("panel", g.get("data-title").replace(" ", "_"), "log" if log else "linear")
    for line in g.iter(NS + "polyline"):
        key = line.get("data-key")
        for pair in line.get("points").split():
            px, py = (float(v) for v in pair.split(","))
            it = xmin + (px - x0) / (x1 - x0) * (xmax - xmin)
            a = ymin + (y1 - py) / (y1 - y0) * (ymax - ymin)   # the axis value (log10 v if log)
            da = 0.006 / (y1 - y0) * (ymax - ymin)             # a rounding of 0.005 px, and some
            if log:
                v = 10 ** a
                tol = v * (10 ** da - 1)
            else:
                v, tol = a, da
            print(key, "%.6f" % it, "%.17g" % v, "%.3g" % tol)
