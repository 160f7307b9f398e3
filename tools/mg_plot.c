/* mg_plot — draws a gpt_train --log-jsonl file as an SVG picture, no server needed: the
   training and validation loss, the learning rate, the grad norm and the throughput against
   the iteration (loss and grad norm on a log scale when they span 30x or more); a log that
   resumed runs appended to is joined into one curve. gpt_train draws the same picture at the
   end of a run; this tool redraws it at any time, e.g. while the run goes on:
     build/mg_plot run.jsonl -o curves.svg          (without -o: run.svg beside run.jsonl)
   The drawing is megatron.h's mg_plot_jsonl.                                               */
#include "megatron.h"
#include <string.h>

static int usage(FILE *f, int code) {
    fprintf(f, "usage: mg_plot LOG.jsonl [-o OUT.svg]\n"
               "  draws gpt_train's --log-jsonl log (loss, validation loss, learning rate,\n"
               "  grad norm, tokens per second against the iteration) as an SVG picture;\n"
               "  OUT.svg defaults to LOG.jsonl with .svg for .jsonl\n");
    return code;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    char path[4096], err[MG_ERRLEN];
    int a;
    for (a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "-h") || !strcmp(argv[a], "--help")) return usage(stdout, 0);
        if (!strcmp(argv[a], "-o")) {
            if (a + 1 >= argc) {
                fprintf(stderr, "mg_plot: error: -o needs a file name (the SVG to write)\n");
                return 2;
            }
            out = argv[++a];
        } else if (argv[a][0] == '-' && argv[a][1]) {
            fprintf(stderr, "mg_plot: error: unknown option %s (valid: -o OUT.svg, --help)\n",
                    argv[a]);
            return 2;
        } else if (in) {
            fprintf(stderr, "mg_plot: error: %s: one log at a time (already given: %s)\n",
                    argv[a], in);
            return 2;
        } else in = argv[a];
    }
    if (!in) return usage(stderr, 2);
    if (!out) {
        mg_plot_default_path(path, sizeof path, in);
        out = path;
    }
    if (mg_plot_jsonl(in, out, err, sizeof err)) {
        fprintf(stderr, "mg_plot: error: %s\n", err);
        return 1;
    }
    printf("mg_plot: %s drawn in %s\n", in, out);
    return 0;
}
