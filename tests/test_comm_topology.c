// mg-test: ranks=1 timeout=60
/* tests/test_comm_topology.c — the process-group layout as pure functions of the rank, checked
   without launching anything: Megatron's published 16-rank example (t=2, p=4; from the
   docstring of megatron/core/parallel_state.py initialize_model_parallel), partition
   properties for many (world, t, p), validation messages and the printable layout.         */
#include "mg_comm.h"
#include "mg_test.h"
#include <string.h>

/* Does world rank r's group of this kind equal want[0..n)? */
static int group_is(const mg_topology *topo, int r, mg_group_kind kind, const int *want, int n) {
    int got[64];
    int m = mg_topology_group(topo, r, kind, got);
    return m == n && (n == 0 || memcmp(got, want, sizeof(int) * (size_t)n) == 0);
}

static void megatron_example(void) {
    /* "16 GPUs, 2 to parallelize the model tensor, 4 to parallelize the model pipeline":
       8 tensor groups [g0, g1], [g2, g3], …; 8 data groups [g0, g2], [g1, g3], [g4, g6], [g5,
       g7], [g8, g10], [g9, g11], [g12, g14], [g13, g15]; 4 pipeline groups [g0, g4, g8, g12],
       [g1, g5, g9, g13], [g2, g6, g10, g14], [g3, g7, g11, g15]. Embedding groups: first and
       last stage of each pipeline group.                                                   */
    static const int tensor[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13},
                                     {14, 15}};
    static const int data[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14},
                                   {13, 15}};
    static const int pipeline[4][4] = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14},
                                       {3, 7, 11, 15}};
    int ok = 1;
    char err[256];
    for (int g = 0; g < 8; g++)
        for (int i = 0; i < 2; i++) {
            mg_topology topo;
            ok &= mg_topology_init(&topo, 16, tensor[g][i], 2, 4, 1, err, sizeof err) == 0;
            ok &= topo.d == 2 && topo.tp_rank == i;
            ok &= group_is(&topo, tensor[g][i], MG_GROUP_TENSOR, tensor[g], 2);
            ok &= mg_topology_init(&topo, 16, data[g][i], 2, 4, 1, err, sizeof err) == 0;
            ok &= topo.dp_rank == i;
            ok &= group_is(&topo, data[g][i], MG_GROUP_DATA, data[g], 2);
        }
    for (int g = 0; g < 4; g++)
        for (int i = 0; i < 4; i++) {
            mg_topology topo;
            int r = pipeline[g][i], emb[2] = {pipeline[g][0], pipeline[g][3]};
            ok &= mg_topology_init(&topo, 16, r, 2, 4, 1, err, sizeof err) == 0;
            ok &= topo.pp_rank == i;
            ok &= group_is(&topo, r, MG_GROUP_PIPELINE, pipeline[g], 4);
            ok &= group_is(&topo, r, MG_GROUP_EMBEDDING, emb, (i == 0 || i == 3) ? 2 : 0);
        }
    CHECK(ok, "Megatron's 16-rank example (t=2, p=4): tensor, data, pipeline, embedding groups");
}

/* Each kind partitions the world: the group of r contains r, at its own coordinate, and every
   member sees the same group (so groups are disjoint and cover their ranks); sizes are t, d, p
   (embedding: 2 on the first and last stage, 1 if p = 1, none in between); coordinates
   round-trip through mg_topology_world_rank.                                                 */
static int partition_ok(int world, int t, int p) {
    int members[64], other[64];
    mg_topology topo;
    char err[256];
    for (int k = MG_GROUP_TENSOR; k < MG_GROUP_KINDS; k++) {
        for (int r = 0; r < world; r++) {
            int n, self = -1;
            if (mg_topology_init(&topo, world, r, t, p, 1, err, sizeof err)) return 0;
            if (mg_topology_world_rank(&topo, topo.tp_rank, topo.dp_rank, topo.pp_rank) != r)
                return 0;
            n = mg_topology_group(&topo, r, (mg_group_kind)k, members);
            if (k == MG_GROUP_TENSOR && n != t) return 0;
            if (k == MG_GROUP_DATA && n != world / (t * p)) return 0;
            if (k == MG_GROUP_PIPELINE && n != p) return 0;
            if (k == MG_GROUP_EMBEDDING)
                if (n != ((topo.pp_rank == 0 || topo.pp_rank == p - 1) ? (p > 1 ? 2 : 1) : 0))
                    return 0;
            for (int i = 0; i < n; i++) {
                if (members[i] == r) self = i;
                if (members[i] < 0 || members[i] >= world) return 0;
                if (mg_topology_group(&topo, members[i], (mg_group_kind)k, other) != n ||
                    memcmp(other, members, sizeof(int) * (size_t)n) != 0) return 0;
            }
            if (n && self < 0) return 0;
            /* the position in the group is the coordinate that varies */
            if (k == MG_GROUP_TENSOR && self != topo.tp_rank) return 0;
            if (k == MG_GROUP_DATA && self != topo.dp_rank) return 0;
            if (k == MG_GROUP_PIPELINE && self != topo.pp_rank) return 0;
        }
    }
    /* tensor-parallel fastest: a tensor group is t consecutive ranks (inside one node) */
    for (int r = 0; r < world; r++) {
        mg_topology_init(&topo, world, r, t, p, 1, err, sizeof err);
        mg_topology_group(&topo, r, MG_GROUP_TENSOR, members);
        for (int i = 0; i < t; i++) if (members[i] != r - r % t + i) return 0;
    }
    return 1;
}

static void partitions(void) {
    int ok = 1, cases = 0;
    for (int world = 1; world <= 48; world++)
        for (int t = 1; t <= world; t++)
            for (int p = 1; t * p <= world; p++) {
                if (world % (t * p)) continue;
                if (!partition_ok(world, t, p)) {
                    printf("# partition check failed: world %d, t %d, p %d\n", world, t, p);
                    ok = 0;
                }
                cases++;
            }
    char name[128];
    snprintf(name, sizeof name, "groups partition the world, in Megatron's order, for all %d "
             "(world <= 48, t, p)", cases);
    CHECK(ok, name);
}

static void validation(void) {
    char err[256];
    int ok = 1;
    ok &= mg_topology_validate(8, 3, 1, 1, err, sizeof err) == -1 &&
          strstr(err, "t*p = 3 (t=3, p=1) does not divide the world size 8") &&
          strstr(err, "one of 1, 2, 4, 8");
    printf("# %s\n", err);
    ok &= mg_topology_validate(12, 2, 4, 1, err, sizeof err) == -1 &&
          strstr(err, "t*p = 8") != NULL;
    ok &= mg_topology_validate(8, 0, 1, 1, err, sizeof err) == -1 && strstr(err, ">= 1");
    ok &= mg_topology_validate(8, 2, 1, 2, err, sizeof err) == -1 &&
          strstr(err, "need pipeline-parallel size p > 1");
    ok &= mg_topology_validate(8, 2, 2, 2, err, sizeof err) == 0 && err[0] == 0;
    ok &= mg_topology_validate(6, 3, 2, 1, err, sizeof err) == 0;
    {
        mg_topology topo;
        ok &= mg_topology_init(&topo, 8, 8, 2, 2, 1, err, sizeof err) == -1 &&
              strstr(err, "outside the world");
    }
    CHECK(ok, "validation: t*p not dividing the world, sizes < 1, v > 1 with p = 1 rejected "
              "with one line naming the valid choices");
}

static void describe(void) {
    mg_topology topo;
    char err[256], buf[4096], small[16];
    int n, n_small, ok = 1;
    mg_topology_init(&topo, 16, 0, 2, 4, 1, err, sizeof err);
    n = mg_topology_describe(&topo, buf, sizeof buf);
    ok &= n == (int)strlen(buf);
    {
        const char *header = "16 ranks = t 2 x p 4 x d 2, v 1; rank = tp + t*(dp + d*pp)\n";
        ok &= strncmp(buf, header, strlen(header)) == 0;
    }
    ok &= strstr(buf, "\nrank   5: tp 1 dp 0 pp 1 | tensor [4,5] data [5,7] pipeline [1,5,9,13] "
                      "embedding []\n") != NULL;
    ok &= strstr(buf, "\nrank  13: tp 1 dp 0 pp 3 | tensor [12,13] data [13,15] pipeline "
                      "[1,5,9,13] embedding [1,13]\n") != NULL;
    n_small = mg_topology_describe(&topo, small, sizeof small);   /* snprintf's rule */
    ok &= n_small == n && strlen(small) == sizeof small - 1;
    if (!ok) printf("%s", buf);
    CHECK(ok, "describe: one header line, one line per rank with coordinates and groups");
}

/* Context parallelism: Megatron-LM's order tp, cp, dp, pp. 16 ranks, t=2, c=2, p=2 (d=2):
   rank = tp + 2·(cp + 2·(dp + 2·pp)). Then, over every (world ≤ 24, t, c, p), each kind's
   group contains the rank at its coordinate and every member sees the same group; the
   data-context group is the union of the data groups of the rank's context group.          */
static void context_parallel(void) {
    static const int context[2] = {4, 6}, data[2] = {4, 8}, dctx[4] = {0, 2, 4, 6};
    static const int pipeline[2] = {4, 12}, tensor[2] = {4, 5};
    mg_topology topo;
    char err[256], buf[4096];
    int ok = 1, layouts = 0, members[64], other[64];
    ok &= mg_topology_init_cp(&topo, 16, 4, 2, 2, 2, 1, err, sizeof err) == 0;
    ok &= topo.tp_rank == 0 && topo.cp_rank == 0 && topo.dp_rank == 1 && topo.pp_rank == 0;
    ok &= group_is(&topo, 4, MG_GROUP_TENSOR, tensor, 2);
    ok &= group_is(&topo, 4, MG_GROUP_CONTEXT, context, 2);
    ok &= group_is(&topo, 4, MG_GROUP_DATA, data, 2) == 0;   /* dp varies with stride t·c = 4 */
    {
        static const int data4[2] = {0, 4};
        ok &= group_is(&topo, 4, MG_GROUP_DATA, data4, 2);
    }
    ok &= group_is(&topo, 4, MG_GROUP_DATA_CONTEXT, dctx, 4);
    ok &= group_is(&topo, 4, MG_GROUP_PIPELINE, pipeline, 2);
    ok &= mg_topology_world_rank_cp(&topo, 1, 1, 1, 1) == 1 + 2 * (1 + 2 * (1 + 2));
    for (int world = 1; world <= 24; world++)
        for (int t = 1; t <= world; t++)
            for (int c = 1; c <= world; c++)
                for (int p = 1; p <= world; p++) {
                    if (mg_topology_validate_cp(world, t, c, p, 1, err, sizeof err)) continue;
                    layouts++;
                    for (int r = 0; r < world; r++) {
                        mg_topology_init_cp(&topo, world, r, t, c, p, 1, err, sizeof err);
                        ok &= mg_topology_world_rank_cp(&topo, topo.tp_rank, topo.cp_rank,
                                                        topo.dp_rank, topo.pp_rank) == r;
                        for (int k = MG_GROUP_TENSOR; k < MG_GROUP_KINDS; k++) {
                            int n = mg_topology_group(&topo, r, (mg_group_kind)k, members), in = 0;
                            for (int i = 0; i < n; i++) {
                                mg_topology o;
                                in |= members[i] == r;
                                mg_topology_init_cp(&o, world, members[i], t, c, p, 1, err,
                                                    sizeof err);
                                ok &= mg_topology_group(&o, members[i], (mg_group_kind)k,
                                                        other) == n &&
                                      memcmp(members, other, sizeof(int) * (size_t)n) == 0;
                            }
                            ok &= n == 0 ? k == MG_GROUP_EMBEDDING : in;
                            if (k == MG_GROUP_CONTEXT) ok &= n == c;
                            if (k == MG_GROUP_DATA_CONTEXT) ok &= n == c * topo.d;
                        }
                    }
                }
    ok &= mg_topology_validate_cp(8, 2, 3, 1, 1, err, sizeof err) == -1 &&
          strstr(err, "t*c*p = 6 (t=2, c=3, p=1) does not divide the world size 8") != NULL;
    ok &= mg_topology_validate_cp(8, 1, 0, 1, 1, err, sizeof err) == -1 &&
          strstr(err, "context-parallel size c=0") != NULL;
    mg_topology_init_cp(&topo, 16, 0, 2, 2, 2, 1, err, sizeof err);
    mg_topology_describe(&topo, buf, sizeof buf);
    ok &= strstr(buf, "16 ranks = t 2 x c 2 x p 2 x d 2, v 1; rank = tp + t*(cp + c*(dp + "
                      "d*pp))\n") == buf;
    ok &= strstr(buf, "\nrank   4: tp 0 cp 0 dp 1 pp 0 | tensor [4,5] data [0,4] pipeline "
                      "[4,12] embedding [4,12] context [4,6] data-context [0,2,4,6]\n") != NULL;
    if (!ok) printf("%s", buf);
    snprintf(err, sizeof err, "context parallelism: rank = tp + t*(cp + c*(dp + d*pp)); "
             "context, data, data-context and pipeline groups of t=2 c=2 p=2 on 16 ranks; %d "
             "layouts (world <= 24) partition the world; t*c*p not dividing it is one line",
             layouts);
    CHECK(ok, err);
}

int main(void) {
    megatron_example();
    context_parallel();
    partitions();
    validation();
    describe();
    return mg_test_summary();
}
