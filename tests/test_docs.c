/* mg-test: ranks=1 flavors=cpu timeout=900 */
/* test_docs.c — the commands in README.md and the pages of docs/ run as written, so the docs
   cannot rot. Every ```sh block of those pages must sit right under one of two markers:
       <!-- run -->              run by this test
       <!-- norun: REASON -->    shown only (several nodes, a GPU, files not shipped …)
   An unmarked block is itself a failure. For each page, its run blocks execute in order, each
   as `bash -e -o pipefail` in one fresh directory per page that holds links to the repository's
   build, data, tests, tools, examples, bench, docs, Makefile and headers (so `build/gpt_train
   …` and the text files of data work; what a block writes stays out of the repository); a
   block fails when it exits non-zero or runs past 180 s, and the page's later blocks are skipped
   (they usually build on it). MPI runs oversubscribed, as root where needed, with passive
   OpenMP waiting. DOCS_ONLY=substring limits the pages (e.g. DOCS_ONLY=data.md).
   What a block prints is not compared with the ```text block a page shows under it (times,
   dates and last digits vary by machine); DOCS_DIFF=1 prints, for each run block followed by
   a text block, `diff -u` of the two (the shown text against the output, dates in brackets
   masked), for a person to read: a maintainer's aid that passes or fails nothing.        */
#include "mg_test.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define BLOCK_TIMEOUT_S 180

static char repo[4096];

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
/* Leading spaces skipped; 1 if line (without its newline) starts with prefix. */
static int starts(const char *line, const char *prefix) {
    while (*line == ' ') line++;
    return !strncmp(line, prefix, strlen(prefix));
}
static int is_fence_close(const char *line) {
    while (*line == ' ') line++;
    if (strncmp(line, "```", 3)) return 0;
    line += 3;
    while (*line == '`') line++;
    return *line == '\n' || *line == '\0' || *line == '\r';
}

/* Runs the page's blocks; reports one check per block (and per unmarked block). */
static void run_page(const char *page) {
    char path[4600], dir[256], line[8192], prev[8192] = "", label[4800], cmd[16384];
    FILE *f, *blk = NULL, *shown = NULL;
    int lineno = 0, block_line = 0, in_block = 0, marker = 0, failed_before = 0;
    int diff = getenv("DOCS_DIFF") && getenv("DOCS_DIFF")[0] == '1', ran = 0, ran_line = 0;
    snprintf(path, sizeof path, "%s/%s", repo, page);
    f = fopen(path, "r");
    if (!f) {
        mg_test_report(0, page, "cannot open");
        return;
    }
    snprintf(dir, sizeof dir, "/tmp/mg_docs_%d", (int)getpid());
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s && cd %s && for x in build data tests "
             "tools examples bench docs Makefile %s/*.h; do ln -s %s/$(basename $x) .; done",
             dir, dir, dir, repo, repo);
    if (system(cmd) != 0) {
        mg_test_report(0, page, "cannot make the directory %s", dir);
        fclose(f);
        return;
    }
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (in_block) {
            if (is_fence_close(line)) {
                in_block = 0;
                if (shown) {   /* DOCS_DIFF: the text shown under the last run block */
                    fclose(shown);
                    shown = NULL;
                    printf("# %s:%d: shown (-) against printed (+)\n", page, ran_line);
                    fflush(stdout);
                    snprintf(cmd, sizeof cmd, "cd %s && sed -E 's/^ ?\\[[0-9]{4}-[0-9: -]+\\]/[date]/' "
                             "block.log > printed.txt && diff -u shown.txt printed.txt | tail -n "
                             "+3 | sed 's/^/  | /'", dir);
                    if (system(cmd) != 0) printf("  | (diff failed)\n");
                }
                if (blk) {
                    double t0 = now_s(), dt;
                    int rc;
                    fclose(blk);
                    blk = NULL;
                    snprintf(label, sizeof label, "%s:%d", page, block_line);
                    if (failed_before) {
                        mg_test_report(0, label, "skipped: an earlier block of the page failed");
                    } else {
                        snprintf(cmd, sizeof cmd, "cd %s && timeout -k 5 %d bash -e -o pipefail "
                                 "block.sh > block.log 2>&1", dir, BLOCK_TIMEOUT_S);
                        rc = system(cmd);
                        rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
                        dt = now_s() - t0;
                        if (rc) {
                            mg_test_report(0, label, rc == 124 ? "timed out after %d s"
                                                              : "exit status %d",
                                           rc == 124 ? BLOCK_TIMEOUT_S : rc);
                            snprintf(cmd, sizeof cmd, "sed 's/^/  | /' %s/block.sh; echo '  | "
                                     "--- output:'; tail -n 15 %s/block.log | sed 's/^/  | /'",
                                     dir, dir);
                            if (system(cmd) != 0) printf("  | (no log)\n");
                            failed_before = 1;
                        } else {
                            mg_test_report(1, label, "%.1f s", dt);
                            ran = diff;
                            ran_line = block_line;
                        }
                    }
                }
            } else if (blk) {
                fputs(line, blk);
            } else if (shown) {
                const char *d = line + (line[0] == ' ');   /* " [YYYY-MM-DD HH:MM:SS]" */
                if (d[0] == '[' && strspn(d + 1, "0123456789") == 4 && d[5] == '-' &&
                    strchr(d, ']')) {   /* masked, as in printed.txt */
                    fputs("[date]", shown);
                    fputs(strchr(d, ']') + 1, shown);
                } else {
                    fputs(line, shown);
                }
            }
        } else if (starts(line, "```")) {
            const char *info = line;
            while (*info == ' ') info++;
            info += 3;
            in_block = 1;
            if (ran && !strncmp(info, "text", 4)) {
                snprintf(cmd, sizeof cmd, "%s/shown.txt", dir);
                shown = fopen(cmd, "w");
            }
            ran = 0;
            if (!strncmp(info, "sh", 2) && (info[2] == '\n' || info[2] == ' ' || !info[2])) {
                block_line = lineno;
                marker = starts(prev, "<!-- run -->") ? 1 : starts(prev, "<!-- norun:") ? 2 : 0;
                if (marker == 0) {
                    snprintf(label, sizeof label, "%s:%d is marked", page, lineno);
                    mg_test_report(0, label, "a ```sh block needs <!-- run --> or "
                                   "<!-- norun: REASON --> on the line above it");
                } else if (marker == 1) {
                    snprintf(cmd, sizeof cmd, "%s/block.sh", dir);
                    blk = fopen(cmd, "w");
                    if (!blk) mg_test_report(0, page, "cannot write %s", cmd);
                }
            }
        }
        if (!in_block && line[strspn(line, " \r\n")]) ran = ran && starts(line, "```");
        strcpy(prev, line);
    }
    fclose(f);
    if (blk) fclose(blk);
    if (shown) fclose(shown);
    if (in_block) {
        snprintf(label, sizeof label, "%s: a fence opened is closed", page);
        mg_test_report(0, label, "the file ends inside a fenced block");
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
}

int main(void) {
    char *pages[256];
    int n = 0, i;
    const char *only = getenv("DOCS_ONLY");
    DIR *d;
    struct dirent *e;
    if (!getcwd(repo, sizeof repo)) return 1;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    setenv("OMP_WAIT_POLICY", "passive", 0);
    pages[n++] = strdup("README.md");
    d = opendir("docs");
    mg_test_report(d != NULL, "docs/ exists", NULL);
    if (d) {
        while ((e = readdir(d)) && n < 256) {
            size_t len = strlen(e->d_name);
            char buf[300];
            if (len < 4 || strcmp(e->d_name + len - 3, ".md")) continue;
            snprintf(buf, sizeof buf, "docs/%s", e->d_name);
            pages[n++] = strdup(buf);
        }
        closedir(d);
    }
    qsort(pages + 1, (size_t)(n - 1), sizeof *pages, cmp_str);
    for (i = 0; i < n; i++) {
        if (!only || strstr(pages[i], only)) {
            printf("# %s\n", pages[i]);
            fflush(stdout);
            run_page(pages[i]);
        }
        free(pages[i]);
    }
    return mg_test_summary();
}
