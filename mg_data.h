/* mg_data.h — everything megatron.h reads from or writes to files: token datasets, the samples
   a training run draws from them, model checkpoints and weight files. Pure host C (no device
   code), usable on its own. Part of megatron.h. MIT license at the end of the file.

   DO THIS in exactly one C or CUDA file:
       #define MG_IMPLEMENTATION
       #include "mg_data.h"
   (megatron.h programs get it through the one implementation file like every header.)

   TOUR
     0. Conventions: every reader mmaps its file (config.json: read whole, at most 16 MiB),
        checks magic, version and every size against the file length and against each other,
        and rejects a bad file with ONE line in the caller's buffer `err` (returns nonzero) —
        never a crash, never a read past the end, never a wait on a pipe (anything but a
        regular file is refused), never an allocation sized by a number the file claims.
        tests/fuzz/ holds the libFuzzer harnesses that check this (docs: README, fuzzing).
        Every writer is atomic: it writes NAME.tmp.<tag>, fsyncs, renames, fsyncs the directory,
        so a failed run never leaves a half-written file under the final name.
     1. Token datasets (gpt_train --data-path): a Megatron indexed dataset (PREFIX.bin +
        PREFIX.idx, megatron/core/datasets/indexed_dataset.py) or an llm.c token file
        (GPT-2 kind, magic 20240520; Llama-3 kind, magic 20240801), told apart by content.
        Sequences, documents and token access.
        A writer for indexed datasets and one for llm.c token files (used by tools/mg_prepare).
        Megatron's mock data (--mock-data): 100 000 computed sequences, lengths from numpy's
        default_rng(0) (PCG64 and SeedSequence, reproduced bit for bit, in 2).
     2. Samplers: samples of seq_len+1 tokens for a --split part, in Megatron's GPTDataset order
        (shuffled document index, sample index, shuffled sample index from
        numpy.random.RandomState(seed) — reproduced bit for bit, MT19937 included) or in plain
        sequential order.
        2b. Blends: samples drawn from several datasets by weight (Megatron's BlendedDataset
        and its blending indices), gpt_train --data-path 0.7 A 0.3 B.
     3. Atomic files and directories; a preallocated file that several processes fill in
        parallel with pwrite (the base of the checkpoint writers); a bounded reader for small
        text files (state files, config.json).
     4. llm.c GPT-2 checkpoints: read (version 3 fp32, version 5 bf16), write (version 3).
     5. safetensors: read (mmap; pointer/dtype/shape by name; __metadata__) and a writer that
        takes the full tensor list first, then pieces of any tensor from any process.
     6. Hugging Face config.json for GPT-2 (n_layer, n_head, n_embd, n_positions, vocab_size).
     7. A small strict JSON parser (used by 5 and 6; public so tests and tools can use it).
     8. TensorBoard event files (TFRecord + the Event protobuf; gpt_train --tensorboard-dir).

   Everything is little-endian on disk; the implementation assumes a little-endian host.
   With a strict -std=c11 build define _GNU_SOURCE or _POSIX_C_SOURCE=200809L (the Makefile
   does) so that mmap/pread/fsync are declared.
*/
#ifndef MG_DATA_H
#define MG_DATA_H

#if defined(MG_IMPLEMENTATION) && !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L   /* effective only when this header comes first */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifndef MGDEF
#ifdef MG_STATIC
#define MGDEF static
#else
#define MGDEF extern
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Every function that can fail returns 0 on success and -1 on failure, with one line (no
   trailing newline) describing the failure written to err[0..errlen) (err may be NULL); a
   longer message keeps its beginning and its end, "…" in between.                          */
#define MG_ERRLEN 512
/* The longest path the files of the library are written and read under, the NUL included
   (Linux's PATH_MAX): longer names are refused with a message, never cut.                  */
#define MG_PATH_MAX 4096

/* ---------------------------------------------------------------------------------------------
   1. Token datasets
   ---------------------------------------------------------------------------------------------
   mg_dataset_open(path) accepts
     - a Megatron prefix P (P.idx + P.bin), or either file name P.idx / P.bin;
     - an llm.c token file, as llm.c's dev/data/data_common.py write_datafile writes it: a
       header of 256 int32 (magic, version, token count N, then zeros), then N tokens, in one
       of llm.c's two kinds (HEADERS_INFO there):
         GPT-2:   magic 20240520, version 1, uint16 tokens;
         Llama-3: magic 20240801, version 7, uint32 tokens.
       llm.c's evaluation files (magic 20240522, dev/data/hellaswag.py, mmlu.py: multiple-
       choice examples, not a token stream) and its model checkpoints are refused as such.
   The format is told by the bytes (an llm.c file is usually also named *.bin).
   A dataset is a list of SEQUENCES (contiguous token runs) grouped into DOCUMENTS. Megatron's
   GPTDataset treats each sequence as one "document" when splitting and sampling; so do we.
   For an llm.c file the sequences are the runs that start at each token llm.c's data scripts
   put before every document: GPT-2's end-of-text MG_LLMC_EOT = 50256 in the GPT-2 kind,
   Llama 3's begin-of-text MG_LLMC_LLAMA3_BOT = 128000 in the Llama-3 kind; a file without
   that token is one sequence. The dataset holds at least one token.                          */
#define MG_LLMC_EOT 50256
#define MG_LLMC_LLAMA3_BOT 128000

typedef enum { MG_DATA_INDEXED = 1, MG_DATA_LLMC_TOKENS = 2, MG_DATA_MOCK = 3 } mg_data_format;

/* Megatron's dtype codes in the .idx header. Only integer codes are valid token types.
   MG_TOKEN_U32 is not one (Megatron's DType has no uint32): it is the storage of llm.c's
   Llama-3 token files only, and an .idx naming code 32 is refused as an unknown code.       */
typedef enum {
    MG_IDX_U8 = 1, MG_IDX_I8 = 2, MG_IDX_I16 = 3, MG_IDX_I32 = 4, MG_IDX_I64 = 5,
    MG_IDX_F64 = 6, MG_IDX_F32 = 7, MG_IDX_U16 = 8, MG_TOKEN_U32 = 32
} mg_idx_dtype;

/* The two kinds of llm.c token file (llm.c's model descriptors "gpt-2" and "llama-3").     */
typedef enum { MG_LLMC_GPT2 = 0, MG_LLMC_LLAMA3 = 1 } mg_llmc_tokens_kind;

typedef struct mg_dataset {
    mg_data_format format;
    mg_idx_dtype token_dtype;   /* llm.c files: MG_IDX_U16 (GPT-2), MG_TOKEN_U32 (Llama-3)  */
    int token_size;             /* bytes per token                                          */
    int64_t n_tokens;           /* all tokens, all sequences                                */
    int64_t n_sequences;
    int64_t n_documents;
    char path[MG_PATH_MAX];     /* what was opened (for messages)                           */
    /* private: mapped files and the raw (possibly unaligned) index arrays */
    const unsigned char *mg__tokens, *mg__lengths, *mg__pointers, *mg__docs;
    void *mg__map[2]; size_t mg__map_len[2];
    void *mg__owned;            /* llm.c, mock: the index arrays built at open              */
    int64_t mg__mock_vocab, mg__mock_eod;   /* mock: tokens are computed from these         */
} mg_dataset;

MGDEF int mg_dataset_open(const char *path, mg_dataset *ds, char *err, size_t errlen);
MGDEF void mg_dataset_close(mg_dataset *ds);
/* Index accessors (bounds are the caller's: 0 <= i < n_sequences, 0 <= d <= n_documents).  */
MGDEF int32_t mg_dataset_seq_len(const mg_dataset *ds, int64_t i);     /* tokens            */
MGDEF int64_t mg_dataset_seq_start(const mg_dataset *ds, int64_t i);   /* token index of 1st */
MGDEF int64_t mg_dataset_doc_bound(const mg_dataset *ds, int64_t d);   /* first sequence of d */
/* Token i (0 <= i < n_tokens) of the concatenation of all sequences, widened to int64.     */
MGDEF int64_t mg_dataset_token(const mg_dataset *ds, int64_t i);
/* Smallest and largest token of the whole dataset (one pass over the data). gpt_train
   checks 0 <= min and max < vocab_size before training.                                    */
MGDEF void mg_dataset_token_range(const mg_dataset *ds, int64_t *min_token, int64_t *max_token);

/* Megatron-LM's mock data (gpt_train --mock-data; MockGPTLowLevelDataset in megatron/core/
   datasets/gpt_dataset.py): MG_MOCK_SEQUENCES sequences, each its own document, of lengths
       L = numpy.random.default_rng(0).integers(1, MG_MOCK_MAX_LEN, size=100000, dtype=int32)
   (1 … 4095 tokens, 2048 on average: about 205 M tokens in all), sequence k holding
       1, 2, …, L_k − 1 (each modulo vocab_size), then eod.
   Only the index is stored (2 MB); the tokens are computed where they are read,
   so the samplers, splits and blends work on it as on a file, in Megatron's order. vocab_size
   is the tokenizer's (unpadded) size, eod its end-of-document id (0 <= eod < vocab_size).
   Megatron's mock dataset fixes the seed, the count and the longest length; so does this.   */
#define MG_MOCK_SEQUENCES 100000
#define MG_MOCK_MAX_LEN 4096
MGDEF int mg_dataset_open_mock(mg_dataset *ds, int64_t vocab_size, int64_t eod, char *err,
                               size_t errlen);

/* Indexed dataset writer (Megatron's IndexedDatasetBuilder): add sequences, close documents,
   finish. Writes PREFIX.bin and PREFIX.idx atomically (temporary names, fsync, rename).
   Tokens must fit the dtype (checked; a token that does not fit fails the add).           */
typedef struct mg_idx_writer {
    mg_idx_dtype dtype;
    int fd;
    int64_t n_tokens;
    int32_t *lengths; int64_t n_seq, cap_seq;
    int64_t *docs; int64_t n_docs, cap_docs;  /* document_indices, starting with 0          */
    int out_of_memory;          /* end_document could not grow docs: finish fails          */
    int prepared;               /* both temporaries complete and synced, not yet renamed    */
    char prefix[400], bin_tmp[440], idx_tmp[440];
} mg_idx_writer;
MGDEF int mg_idx_writer_begin(mg_idx_writer *w, const char *prefix, mg_idx_dtype dtype,
                              char *err, size_t errlen);
MGDEF int mg_idx_writer_add(mg_idx_writer *w, const int32_t *tokens, int64_t n,
                            char *err, size_t errlen);          /* one sequence             */
MGDEF void mg_idx_writer_end_document(mg_idx_writer *w);        /* closes the open document */
MGDEF int mg_idx_writer_finish(mg_idx_writer *w, char *err, size_t errlen); /* closes docs  */
MGDEF void mg_idx_writer_abort(mg_idx_writer *w);               /* removes the temporaries  */
/* finish in two steps, for several datasets that are written all or none: prepare checks the
   dataset and completes both temporaries (synced) without renaming; once every writer has
   prepared, commit renames each into place (.bin, then .idx). A failed prepare has aborted
   its writer; abort removes a prepared writer's temporaries too.                         */
MGDEF int mg_idx_writer_prepare(mg_idx_writer *w, char *err, size_t errlen);
MGDEF int mg_idx_writer_commit(mg_idx_writer *w, char *err, size_t errlen);

/* llm.c token file writer, atomically: the header of `kind` (GPT-2: 20240520, 1, n; Llama-3:
   20240801, 7, n) + n tokens (uint16; uint32). A token the kind cannot hold is refused.     */
MGDEF int mg_llmc_tokens_write(const char *path, mg_llmc_tokens_kind kind, const int32_t *tokens,
                               int64_t n, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   2. Samplers
   ---------------------------------------------------------------------------------------------
   --split "a,b,c" (Megatron's, e.g. "969,30,1" or "98,2,0"): weights normalised to sum 1, then
   part i covers sequences [round(S·c_i), round(S·c_{i+1})) with c the cumulative weights and
   round() half-to-even (Python's). A part with zero weight does not exist (error if asked).

   MG_ORDER_SHUFFLED (Megatron's GPTDataset, add_extra_token_to_sequence = 1, drop the last
   partial sample): with T tokens in the part and n_samples wanted,
     epochs E = smallest with E·T >= n_samples·seq_len + 1;
     document index = the part's sequence ids repeated E times, shuffled by
       RandomState(seed) (when E > 1 and the last epoch would contribute fewer than 80% of an
       epoch's samples, the first E-1 epochs and the last one are shuffled separately);
     sample index: sample j starts where sample j-1 ended minus one token (samples overlap by
       one token and run across document boundaries); (E·T - 1) / seq_len samples;
     shuffle index: a permutation of the samples (the first E-1 epochs' samples and the last
       epoch's shuffled separately in the separated case).
     Sample i = tokens of sample shuffle[i]. Available samples (mg_sampler.n_samples) can be
     more than requested (whole epochs).
   MG_ORDER_SEQUENTIAL: sample i = tokens [i·seq_len, i·seq_len + seq_len + 1) of the part's
     token stream (its sequences concatenated), positions taken modulo the stream length (the
     stream wraps around at its end). With a global batch B, sample k·B + b is row b of
     iteration k. n_samples = as requested.
   The index is built the same on every rank (no communication, a fraction of a second).   */
typedef enum { MG_SPLIT_TRAIN = 0, MG_SPLIT_VALID = 1, MG_SPLIT_TEST = 2 } mg_split_part;
typedef enum { MG_ORDER_SHUFFLED = 0, MG_ORDER_SEQUENTIAL = 1 } mg_data_order;

typedef struct mg_sampler_desc {
    const char *split;          /* NULL = "969,30,1" (Megatron's default)                   */
    mg_split_part part;
    int seq_len;                /* s >= 1 (shuffled: s >= 2, as Megatron); samples hold s+1 */
    int64_t n_samples;          /* samples the run will ask for: indices [0, n_samples)      */
    uint32_t seed;              /* Megatron --seed (default 1234)                           */
    mg_data_order order;
    int index_width;            /* 0: each index array 4 bytes an entry where all its values
                                   fit, else 8 (mg_sampler); 8: 8 regardless (a test hook
                                   for the 64-bit path, which small data never reach)       */
} mg_sampler_desc;

/* An index array of non-negative integers, 4 bytes an entry (uint32) when every value it
   will hold fits 32 bits, else 8 (int64): how Megatron's GPTDataset stores its sample index
   (int32 pairs) and shuffle index (uint32) where they fit. Entry k: mg_ix_get(a, k).       */
typedef struct mg_ix {
    void *v;
    int width;                  /* bytes an entry: 4 or 8                                   */
} mg_ix;
MGDEF int64_t mg_ix_get(mg_ix a, int64_t k);

typedef struct mg_sampler {
    const mg_dataset *ds;
    mg_data_order order;
    int seq_len;
    int64_t n_samples;          /* valid sample indices are [0, n_samples)                  */
    int64_t seq_begin, seq_end; /* the part's sequences                                     */
    int64_t part_tokens;        /* tokens in the part (one epoch)                           */
    int num_epochs;             /* shuffled order                                           */
    int separate_final_epoch;
    int32_t *doc_index;         /* [n_doc_index] sequence ids (shuffled order)              */
    int64_t n_doc_index;
    /* Shuffled order. A sample costs 12 bytes of these (32-bit entries) below 2^32 samples,
       16 above (a 64-bit shuffle index); mg_sampler_index_bytes adds them up.             */
    mg_ix sample_index;         /* [(n_samples + 1) * 2]: (position in doc_index, offset)   */
    mg_ix shuffle_index;        /* [n_samples]                                               */
} mg_sampler;

/* Parses a --split string into three normalised weights.                                   */
MGDEF int mg_split_parse(const char *split, double weights[3], char *err, size_t errlen);
/* The sequence range [*begin, *end) of part for n_sequences sequences (after parse).       */
MGDEF int mg_split_range(const char *split, mg_split_part part, int64_t n_sequences,
                         int64_t *begin, int64_t *end, char *err, size_t errlen);
/* Sequences the part gets of n_sequences (0: none, the part has no weight or rounds to
   nothing), or -1 when split does not parse.                                               */
MGDEF int64_t mg_split_count(const char *split, mg_split_part part, int64_t n_sequences);
/* The smallest S0 such that every dataset of S >= S0 sequences gives the part at least one
   sequence (17 for the valid part of "969,30,1"); -1 when the part has no weight or split
   does not parse. What a message suggests to a user whose validation part came out empty. */
MGDEF int64_t mg_split_min_sequences(const char *split, mg_split_part part);
MGDEF int mg_sampler_init(mg_sampler *smp, const mg_dataset *ds, const mg_sampler_desc *desc,
                          char *err, size_t errlen);
/* Writes the seq_len + 1 tokens of sample i into tokens[] (input = tokens[0..s),
   targets = tokens[1..s+1)). Fails for i outside [0, n_samples) or a token beyond int32.  */
MGDEF int mg_sampler_get(const mg_sampler *smp, int64_t i, int32_t *tokens,
                         char *err, size_t errlen);
MGDEF void mg_sampler_free(mg_sampler *smp);
/* Bytes the sampler's indices hold (document, sample and shuffle index; 0 when sequential). */
MGDEF int64_t mg_sampler_index_bytes(const mg_sampler *smp);

/* ---------------------------------------------------------------------------------------------
   2b. Blended data (Megatron's BlendedDataset; gpt_train --data-path 0.7 A 0.3 B)
   ---------------------------------------------------------------------------------------------
   A blend draws samples from n datasets with normalised weights w. Sample i of the blend is
   sample dataset_sample_index[i] of dataset dataset_index[i], built by Megatron's
   build_blending_indices (megatron/core/datasets/helpers.cpp): with c_k the samples dataset k
   has given so far, sample i goes to the k of the largest error w_k·max(i, 1) − c_k (the
   first k on a tie), and c_k grows by one. So after every prefix of i samples, each c_k is
   within one sample of w_k·i: the realised fractions track the weights at every point.
   Dataset k's own sampler (its --split part, shuffled or sequential, same seed) is asked for
   ceil(ceil(N·w_k)·1.005) samples (Megatron's _get_size_per_split_per_dataset with its
   default 0.5% surplus), N the blend's size; a blend of one unweighted dataset is that
   dataset's sampler itself (sample i = its sample i, N asked). Several unweighted datasets
   are blended by their sizes, as Megatron's BlendedMegatronDatasetBuilder does when the blend
   has no weights: each sampler holds one epoch of its part (num_samples None), w_k = its
   samples / all their samples, and the blend holds min(N, all their samples) samples.
   The indices are a pure function of (weights, N): every rank builds the same, and a resumed
   run (same N) reads exactly the samples the uninterrupted run would.                       */
#define MG_BLEND_MAX 32767      /* Megatron stores dataset_index as int16                  */

/* Megatron's get_blend_from_list: words = one PREFIX, "W1 P1 W2 P2 …" (weights > 0,
   normalised here), or several prefixes without weights ("P1 P2 …", none a number: blended
   by their sizes). Fills prefixes[i] (pointers into words) and weights[i] (unweighted:
   *weighted = 0, weights untouched); *n = datasets. cap = room in both arrays. flag names
   the option for the error line ("--data-path").                                            */
MGDEF int mg_blend_parse(const char *flag, const char *const *words, int n_words,
                         const char **prefixes, double *weights, int cap, int *n, int *weighted,
                         char *err, size_t errlen);
/* The blending indices for size samples (dataset_index[size], dataset_sample_index[size]);
   -1 only when out of memory.                                                              */
MGDEF int mg_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                           int64_t *dataset_sample_index);

typedef struct mg_blend {
    int n;                      /* datasets                                                 */
    int weighted;               /* 0: one dataset, no blending indices                     */
    double *weights;            /* [n] normalised (several unweighted datasets: their sizes) */
    mg_sampler *smp;            /* [n] each dataset's sampler over its part                */
    int64_t n_samples;          /* valid sample indices [0, n_samples)                      */
    int16_t *dataset_index;     /* [n_samples] (weighted)                                   */
    int64_t *dataset_sample_index;
} mg_blend;
/* ds[k] are open datasets (kept open by the caller while the blend lives); weights as from
   mg_blend_parse (ignored when !weighted, then n must be 1); desc->n_samples = N.          */
MGDEF int mg_blend_init(mg_blend *b, const mg_dataset *const *ds, const double *weights,
                        int n, int weighted, const mg_sampler_desc *desc, char *err,
                        size_t errlen);
/* Sample i's seq_len + 1 tokens, as mg_sampler_get.                                        */
MGDEF int mg_blend_get(const mg_blend *b, int64_t i, int32_t *tokens, char *err, size_t errlen);
MGDEF void mg_blend_free(mg_blend *b);
/* Megatron's sample counts for a run (train, valid, test), as its training loop asks them:
   train = iters·B; valid = (iters / eval_interval + 1)·eval_iters·B; test = eval_iters·B.  */
MGDEF void mg_data_num_samples(int64_t train_iters, int64_t global_batch,
                               int64_t eval_interval, int64_t eval_iters, int64_t out[3]);

/* numpy.random.RandomState, legacy MT19937 (exposed for tests and tools):
   seed = init_genrand(seed); shuffle = numpy's Fisher-Yates with masked rejection sampling. */
typedef struct mg_mt19937 { uint32_t key[624]; int pos; } mg_mt19937;
MGDEF void mg_mt19937_seed(mg_mt19937 *mt, uint32_t seed);
MGDEF uint32_t mg_mt19937_next32(mg_mt19937 *mt);
MGDEF uint64_t mg_mt19937_interval(mg_mt19937 *mt, uint64_t max);  /* uniform in [0, max]    */
MGDEF void mg_mt19937_shuffle_i32(mg_mt19937 *mt, int32_t *x, int64_t n);
MGDEF void mg_mt19937_shuffle_i64(mg_mt19937 *mt, int64_t *x, int64_t n);

/* numpy.random.default_rng(seed)'s generator (exposed for tests and tools): PCG64 (128-bit LCG,
   XSL-RR output) seeded through numpy's SeedSequence(seed) (its hash mix of the seed's 32-bit
   words into a pool of 4, then generate_state(4, uint64): state = words 0-1, increment 2-3).
   next32 is numpy's next_uint32: the low half of a 64-bit output, then its high half.
   bounded32(rng) is uniform in [0, rng] by Lemire's multiply-and-reject with numpy's threshold
   (buffered_bounded_lemire_uint32; rng < 2^32 − 1): Generator.integers(low, high, size,
   dtype=int32) gives low + bounded32(high − 1 − low) for each element in turn.             */
typedef struct mg_pcg64 {
    uint64_t state_hi, state_lo, inc_hi, inc_lo;
    int has_half;               /* the high half of the last output is still unused         */
    uint32_t half;
} mg_pcg64;
MGDEF void mg_pcg64_seed(mg_pcg64 *g, uint64_t seed);
MGDEF uint64_t mg_pcg64_next64(mg_pcg64 *g);
MGDEF uint32_t mg_pcg64_next32(mg_pcg64 *g);
MGDEF uint32_t mg_pcg64_bounded32(mg_pcg64 *g, uint32_t rng);

/* ---------------------------------------------------------------------------------------------
   3. Atomic files and directories
   ------------------------------------------------------------------------------------------ */
/* Reads a whole small file (a state file, a config.json) into a new NUL-terminated buffer
   (*data, release with MG_FREE; *len bytes before the NUL). Refuses, with one line, what is
   not a regular file (a directory, a named pipe: no waiting for a writer) and files larger
   than max_bytes (so a wrong path cannot make it allocate gigabytes).                      */
MGDEF int mg_read_file(const char *path, size_t max_bytes, char **data, size_t *len, char *err,
                       size_t errlen);
/* Reads up to n bytes from the start of a regular file (to tell formats apart by their first
   bytes); returns the count read, or -1 with one line in err if it cannot be opened, is not a
   regular file (directory, named pipe: refused without waiting) or cannot be read.        */
MGDEF int64_t mg_read_head(const char *path, void *buf, size_t n, char *err, size_t errlen);
/* Writes data to PATH.tmp.<pid>, fsyncs it, renames it to PATH, fsyncs the directory.       */
MGDEF int mg_atomic_write(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* A file written through stdio, atomically: mg_atomic_fopen opens PATH.tmp.<pid> (its name
   returned in tmp) for writing; mg_atomic_fclose flushes, fsyncs and closes it and, when commit
   is set and every write succeeded, renames it to PATH and fsyncs the directory, else removes
   it. A reader never sees half a file; a failed or interrupted writer leaves the old PATH.  */
MGDEF FILE *mg_atomic_fopen(const char *path, char *tmp, size_t tmp_cap, char *err,
                            size_t errlen);
MGDEF int mg_atomic_fclose(FILE *f, const char *tmp, const char *path, int commit, char *err,
                           size_t errlen);
/* 1 when a and b name one existing file (same device and inode, whatever the spelling or
   link), else 0: a writer refuses an output that is one of its inputs with it.            */
MGDEF int mg_same_file(const char *a, const char *b);
/* Directory checkpoints: begin creates DIR.tmp.<tag> (tag NULL = the pid; ranks that write
   into one directory pass a common tag, e.g. the iteration) and returns its name in tmp_dir;
   files are written inside; commit fsyncs it and puts it in place of DIR (an existing DIR is
   swapped out atomically and then removed). abort removes the temporary directory.       */
MGDEF int mg_atomic_dir_begin(const char *dir, const char *tag, char *tmp_dir, size_t tmp_cap,
                              char *err, size_t errlen);
MGDEF int mg_atomic_dir_commit(const char *tmp_dir, const char *dir, char *err, size_t errlen);
MGDEF void mg_atomic_dir_abort(const char *tmp_dir);

/* Preallocated file: the creator makes PATH.tmp.<tag> at its final size and writes the
   header bytes; joiners (other processes, same path/size/tag, after the creator) open it;
   everyone pwrites pieces at byte offsets; joiners mg_pfile_close (fsync + close); then the
   creator mg_pfile_commit (fsync, rename to PATH, fsync directory). abort: close, and the
   creator unlinks the temporary.                                                         */
typedef struct mg_pfile {
    int fd, creator;
    int64_t size;
    char path[MG_PATH_MAX], tmp[MG_PATH_MAX];
} mg_pfile;
MGDEF int mg_pfile_begin(mg_pfile *f, const char *path, const char *tag, int create, int64_t size,
                         const void *header, size_t header_len, char *err, size_t errlen);
MGDEF int mg_pfile_write(mg_pfile *f, int64_t offset, const void *data, size_t n,
                         char *err, size_t errlen);
MGDEF int mg_pfile_close(mg_pfile *f, char *err, size_t errlen);   /* joiners            */
MGDEF int mg_pfile_commit(mg_pfile *f, char *err, size_t errlen);  /* creator            */
MGDEF void mg_pfile_abort(mg_pfile *f);

/* ---------------------------------------------------------------------------------------------
   File dtypes (safetensors names; llm.c checkpoints use F32 and BF16)
   ------------------------------------------------------------------------------------------ */
typedef enum {
    MG_ST_F32 = 0, MG_ST_BF16, MG_ST_F16, MG_ST_F64, MG_ST_I64, MG_ST_I32, MG_ST_I16, MG_ST_I8,
    MG_ST_U64, MG_ST_U32, MG_ST_U16, MG_ST_U8, MG_ST_BOOL, MG_ST_F8_E4M3, MG_ST_F8_E5M2,
    MG_ST_NDTYPES
} mg_st_dtype;
MGDEF size_t mg_st_dtype_size(mg_st_dtype dt);
MGDEF const char *mg_st_dtype_name(mg_st_dtype dt);     /* "F32", "BF16", ...               */

/* ---------------------------------------------------------------------------------------------
   4. llm.c GPT-2 checkpoints (gpt2_124M.bin & co.)
   ---------------------------------------------------------------------------------------------
   Header 256 int32: magic 20240326, version (3 fp32 / 5 bf16), maxT, V, L, NH, C, Vp. Then the
   16 parameter tensors below, contiguous, in this order.                                   */
#define MG_LLMC_NPARAMS 16
typedef struct mg_llmc_config {
    int max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size;
} mg_llmc_config;
typedef struct mg_llmc_param {
    const char *name;           /* "wte", "wpe", "ln1w", ..., "lnfb"                        */
    int ndim;
    int64_t shape[3];           /* e.g. qkvw: (L, 3C, C)                                    */
    int64_t numel, offset;      /* elements; offset in elements from the first parameter    */
} mg_llmc_param;
typedef struct mg_llmc_checkpoint {
    mg_llmc_config cfg;
    int version;
    mg_st_dtype dtype;          /* MG_ST_F32 (v3) or MG_ST_BF16 (v5)                        */
    mg_llmc_param params[MG_LLMC_NPARAMS];
    int64_t n_params;           /* total elements                                          */
    const void *data;           /* mmapped: parameter p at data + params[p].offset·size     */
    void *mg__map; size_t mg__map_len;
} mg_llmc_checkpoint;
/* Shapes and offsets of the 16 tensors for a config (fails on an invalid config).          */
MGDEF int mg_llmc_layout(const mg_llmc_config *cfg, mg_llmc_param params[MG_LLMC_NPARAMS],
                         int64_t *n_params, char *err, size_t errlen);
MGDEF int mg_llmc_open(const char *path, mg_llmc_checkpoint *ck, char *err, size_t errlen);
MGDEF void mg_llmc_close(mg_llmc_checkpoint *ck);
/* Version 3 (fp32) writer, whole buffer at once (params: n_params floats, layout order).   */
MGDEF int mg_llmc_write(const char *path, const mg_llmc_config *cfg, const float *params,
                        char *err, size_t errlen);
/* ... or piecewise from several processes: a preallocated file with the header written;
   pwrite fp32 elements at byte MG_LLMC_HEADER_BYTES + 4·(params[p].offset + i).          */
#define MG_LLMC_HEADER_BYTES 1024
MGDEF int mg_llmc_writer_begin(mg_pfile *f, const char *path, const char *tag, int create,
                               const mg_llmc_config *cfg, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   5. safetensors
   ------------------------------------------------------------------------------------------ */
#define MG_ST_MAX_DIMS 8
typedef struct mg_st_tensor {
    char *name;
    mg_st_dtype dtype;
    int ndim;
    int64_t shape[MG_ST_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const void *data;           /* reader: inside the mapping (may be unaligned for dtypes
                                   wider than their offset's alignment; memcpy to be safe)  */
} mg_st_tensor;
typedef struct mg_st_file {
    int n_tensors;
    mg_st_tensor *tensors;      /* in file order (by data offset)                           */
    int n_meta;
    char **meta_keys, **meta_values;  /* "__metadata__" string pairs                        */
    void *mg__map; size_t mg__map_len;
} mg_st_file;
MGDEF int mg_st_open(const char *path, mg_st_file *st, char *err, size_t errlen);
MGDEF void mg_st_close(mg_st_file *st);
MGDEF const mg_st_tensor *mg_st_find(const mg_st_file *st, const char *name);  /* or NULL   */
MGDEF const char *mg_st_meta(const mg_st_file *st, const char *key);           /* or NULL   */

/* Writer. begin takes the full list (name, dtype, shape) and the metadata (n_meta key/value
   pairs), lays the tensors out by element size, largest first, otherwise in the given order
   (as the reference writer does: with the header padded to 8 bytes every tensor's data is then
   aligned to its element size), creates PATH.tmp.<tag> at its final size
   with the header written (create = 1), or opens that file as a joiner (create = 0: another
   process, same arguments, after the creator's begin; the header is compared). Then any
   process writes any element range of any tensor; joiners close; the creator commits.     */
typedef struct mg_st_spec {
    const char *name;
    mg_st_dtype dtype;
    int ndim;
    int64_t shape[MG_ST_MAX_DIMS];
} mg_st_spec;
typedef struct mg_st_writer {
    mg_pfile file;
    int n_tensors;
    char **names;
    mg_st_dtype *dtypes;
    int64_t *numel, *offset;    /* offset: absolute byte position in the file               */
} mg_st_writer;
MGDEF int mg_st_writer_begin(mg_st_writer *w, const char *path, const char *tag, int create,
                             const mg_st_spec *tensors, int n_tensors,
                             const char *const *meta_keys, const char *const *meta_values,
                             int n_meta, char *err, size_t errlen);
MGDEF int mg_st_writer_find(const mg_st_writer *w, const char *name);          /* or -1     */
/* Writes n elements of tensor t starting at element elem_offset (data in the tensor's dtype). */
MGDEF int mg_st_writer_write(mg_st_writer *w, int t, int64_t elem_offset, const void *data,
                             int64_t n, char *err, size_t errlen);
MGDEF int mg_st_writer_close(mg_st_writer *w, char *err, size_t errlen);    /* joiners       */
MGDEF int mg_st_writer_commit(mg_st_writer *w, char *err, size_t errlen);   /* creator       */
MGDEF void mg_st_writer_abort(mg_st_writer *w);

/* ---------------------------------------------------------------------------------------------
   6. Hugging Face GPT-2 config.json
   ------------------------------------------------------------------------------------------ */
typedef struct mg_hf_config {
    int n_layer, n_head, n_embd, n_positions, vocab_size;
    int gelu_exact;             /* activation_function "gelu" (erf); 0: the tanh GELU        */
    int relu2;                  /* activation_function "relu2": the squared ReLU             */
} mg_hf_config;
/* Writes a GPT2Config-compatible config.json: the sizes, and every key that decides the math
   stated explicitly with megatron.h's value (model_type gpt2, activation gelu_new, or gelu
   with gelu_exact, or relu2 with relu2, layernorm eps 1e-5, scaled attention, no per-layer scaling, no
   cross-attention, n_inner null, tied word embeddings).                                    */
MGDEF int mg_hf_config_write(const char *path, const mg_hf_config *cfg, char *err, size_t errlen);
/* Reads a GPT-2 config.json (at most 16 MiB, a JSON object). The five sizes are positive
   integers below 2^31. The GPT2Config keys that change the function the model computes must
   hold what megatron.h computes, else one line names the key, its value and ours:
     model_type "gpt2"; activation_function one of the tanh GELUs ("gelu_new",
     "gelu_pytorch_tanh", "gelu_fast", "gelu_accurate": one function, equal to fp32
     rounding), or the exact one, "gelu" or "gelu_python" (gelu_exact 1), or the squared
     ReLU, "relu2" (relu2 1);
     layer_norm_epsilon 1e-5; scale_attn_weights true;
     scale_attn_by_inverse_layer_idx false; add_cross_attention false; n_inner null or
     4·n_embd; tie_word_embeddings true; reorder_and_upcast_attn true or false (it only
     upcasts the attention scores to fp32 and scales before the product: the same in fp32).
   A missing key means GPT2Config's default (transformers 4.40.2), sizes included: n_layer 12,
   n_head 12, n_embd 768, n_positions 1024, vocab_size 50257; the math keys' defaults are
   the values above. Other keys (dropout rates, token ids, summary_*) do not change the
   function and are ignored.                                                                */
MGDEF int mg_hf_config_read(const char *path, mg_hf_config *cfg, char *err, size_t errlen);

/* ---------------------------------------------------------------------------------------------
   7. JSON (RFC 8259, strict: no trailing commas, comments, NaN, leading zeros or control
      characters in strings; nesting depth <= 64). The parse is a flat token array.
   ------------------------------------------------------------------------------------------ */
typedef enum { MG_JSON_OBJECT = 1, MG_JSON_ARRAY, MG_JSON_STRING, MG_JSON_NUMBER,
               MG_JSON_TRUE, MG_JSON_FALSE, MG_JSON_NULL } mg_json_type;
typedef struct mg_json_tok {
    mg_json_type type;
    int64_t start, end;         /* byte range in the text (strings: inside the quotes)      */
    int64_t size;               /* objects: number of keys; arrays: number of elements      */
    int64_t next;               /* index of the first token after this value's subtree      */
} mg_json_tok;
typedef struct mg_json {
    const char *text;
    mg_json_tok *toks;          /* toks[0] is the root value; an object's children are
                                   key (a string token), value, key, value, ...            */
    int64_t n;
} mg_json;
MGDEF int mg_json_parse(mg_json *js, const char *text, size_t len, char *err, size_t errlen);
MGDEF void mg_json_free(mg_json *js);
/* Object member lookup: token index of the value of key in object tok, or -1. A key given
   twice means its last value, as Python's json.loads (and JavaScript) read it: the files
   read here are written, and their references read, by Python.                           */
MGDEF int64_t mg_json_get(const mg_json *js, int64_t obj, const char *key);
/* Decodes string token tok (escapes, \u incl. surrogate pairs -> UTF-8) into a new
   NUL-terminated string allocated with MG_MALLOC (release with MG_FREE, by default free);
   NULL if tok is not a string or the string holds a \u0000.                                */
MGDEF char *mg_json_strdup(const mg_json *js, int64_t tok);
/* Number token as an integer (fails on fractions, exponents or overflow).                  */
MGDEF int mg_json_int(const mg_json *js, int64_t tok, int64_t *value);

/* ---------------------------------------------------------------------------------------------
   8. TensorBoard event files (what torch.utils.tensorboard.SummaryWriter writes, without it):
      DIR/events.out.tfevents.<unix time>.<host>.<pid>, a TFRecord file — each record is
        uint64 length | uint32 masked CRC32C(length bytes) | data | uint32 masked CRC32C(data)
      (CRC32C: the Castagnoli polynomial, reflected 0x82F63B78; masked: rotate right by 15,
      add 0xa282ead8) — whose data is one serialized tensorboard Event protobuf:
        Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
                  Summary summary = 5; }
        Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
      The first record says file_version "brain.Event:2"; then one Event per scalar. Every
      record is built in memory and handed to the kernel in one write(): a running
      `tensorboard --logdir DIR` sees it at once, and a run killed at any moment leaves a file
      whose complete records all read back (a reader stops at a cut record).                */
typedef struct mg_tb_writer {
    int fd;                     /* -1: closed                                                 */
    char path[4096];            /* the event file                                            */
} mg_tb_writer;
/* Creates DIR (one level) if needed and a new event file in it. 0, or -1 with err.         */
MGDEF int mg_tb_open(mg_tb_writer *w, const char *dir, char *err, size_t errlen);
/* Appends the scalar `tag` = value at step (wall_time: now). 0, or -1 with err.           */
MGDEF int mg_tb_scalar(mg_tb_writer *w, const char *tag, double value, int64_t step,
                       char *err, size_t errlen);
MGDEF void mg_tb_close(mg_tb_writer *w);
/* CRC32C of n bytes (crc 0 to start; pass the previous result to continue).                */
MGDEF uint32_t mg_crc32c(uint32_t crc, const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* MG_DATA_H */

/* =============================================================================================
   IMPLEMENTATION
   ========================================================================================== */
#if defined(MG_IMPLEMENTATION) && !defined(MG_IMPLEMENTATION_ELSEWHERE)
#ifndef MG_DATA_IMPLEMENTED
#define MG_DATA_IMPLEMENTED

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#if defined(MG_MALLOC) != defined(MG_FREE)
#error "define both MG_MALLOC and MG_FREE, or neither"
#endif
#ifndef MG_MALLOC
#define MG_MALLOC(sz) malloc(sz)
#define MG_FREE(p) free(p)
#endif

/* ---------------------------------------------------------------------------------------------
   Common helpers: one-line errors, little-endian loads, checked arithmetic, mapped files
   ------------------------------------------------------------------------------------------ */

/* Formats one line into err (newlines become spaces) and returns -1.                         */
/* One message line into out[cap]: line breaks become blanks, and a message longer than cap
   (long paths) keeps its beginning (what failed) and its end (why), with "…" for the middle
   instead of losing the reason at the cut.                                                 */
static void mg__vline(char *out, size_t cap, const char *fmt, va_list ap) {
    va_list again;
    int n;
    if (!out || !cap) return;
    va_copy(again, ap);
    n = vsnprintf(out, cap, fmt, ap);
    if (n > 0 && (size_t)n >= cap && cap > 64) {
        char *full = (char *)MG_MALLOC((size_t)n + 1);
        if (full) {
            size_t tail = (cap - 1) / 2, head = cap - 1 - tail - 3;   /* "…" is 3 bytes */
            vsnprintf(full, (size_t)n + 1, fmt, again);
            while (head > 0 && ((unsigned char)full[head] & 0xC0) == 0x80) head--;  /* UTF-8 */
            while (tail > 0 && ((unsigned char)full[n - tail] & 0xC0) == 0x80) tail--;
            memcpy(out, full, head);
            memcpy(out + head, "\xe2\x80\xa6", 3);
            memcpy(out + head + 3, full + n - tail, tail + 1);
            MG_FREE(full);
        }
    }
    va_end(again);
    for (char *c = out; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
}

static int mg__fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mg__vline(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static uint16_t mg__ld16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t mg__ld32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t mg__ld64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static int32_t mg__ldi32(const unsigned char *p) { int32_t v; memcpy(&v, p, 4); return v; }
static int64_t mg__ldi64(const unsigned char *p) { int64_t v; memcpy(&v, p, 8); return v; }

/* a·b and a+b for non-negative int64, failing (returning 0) instead of overflowing.        */
static int mg__mul(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || (a != 0 && b > INT64_MAX / a)) return 0;
    *out = a * b;
    return 1;
}
static int mg__add(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0 || a > INT64_MAX - b) return 0;
    *out = a + b;
    return 1;
}

static void *mg__alloc(size_t n) { return MG_MALLOC(n ? n : 1); }
static char *mg__strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = (char *)mg__alloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
static int mg__ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Opens a file for reading only if it is a regular file. O_NONBLOCK: opening a FIFO (a named
   pipe, /dev/stdin from a shell pipe) would otherwise wait for a writer forever; regular
   files ignore the flag. Directories, FIFOs, devices and sockets get their own message.   */
static int mg__open_regular(const char *path, int *fd_out, int64_t *size, char *err,
                            size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    *fd_out = -1;
    if (fd < 0) return mg__fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return mg__fail(err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return mg__fail(err, errlen, S_ISDIR(st.st_mode) ? "%s: is a directory, not a file"
                        : "%s: not a regular file (a pipe, device or socket)", path);
    }
    *fd_out = fd;
    *size = (int64_t)st.st_size;
    return 0;
}

/* Maps a whole regular file read-only. An empty file maps to (NULL, 0).                     */
static int mg__map_file(const char *path, void **map, size_t *len, char *err, size_t errlen) {
    int fd;
    int64_t size;
    *map = NULL;
    *len = 0;
    if (mg__open_regular(path, &fd, &size, err, errlen) != 0) return -1;
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return mg__fail(err, errlen, "%s: mmap failed: %s", path, strerror(e));
        }
        *map = p;
        *len = (size_t)size;
    }
    close(fd);
    return 0;
}
static void mg__unmap(void *map, size_t len) {
    if (map && len) munmap(map, len);
}
/* Maps a file that must hold at least a header of `need` bytes (unmapped on failure).      */
static int mg__map_header(const char *path, size_t need, void **map, size_t *len, char *err,
                          size_t errlen) {
    if (mg__map_file(path, map, len, err, errlen) != 0) return -1;
    if (*len >= need) return 0;
    mg__unmap(*map, *len);
    *map = NULL;
    return mg__fail(err, errlen, "%s: truncated header (%zu bytes, need %zu)", path, *len, need);
}
MGDEF int64_t mg_read_head(const char *path, void *buf, size_t n, char *err, size_t errlen) {
    int fd;
    int64_t size;
    if (mg__open_regular(path, &fd, &size, err, errlen) != 0) return -1;
    ssize_t got = read(fd, buf, n);
    int e = errno;
    close(fd);
    if (got < 0) return mg__fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
    return (int64_t)got;
}
MGDEF int mg_read_file(const char *path, size_t max_bytes, char **data, size_t *len, char *err,
                       size_t errlen) {
    int fd;
    int64_t size;
    *data = NULL;
    *len = 0;
    if (mg__open_regular(path, &fd, &size, err, errlen) != 0) return -1;
    if ((uint64_t)size > (uint64_t)max_bytes) {
        close(fd);
        return mg__fail(err, errlen, "%s: %lld bytes, more than the %zu this file may hold", path,
                        (long long)size, max_bytes);
    }
    char *buf = (char *)mg__alloc((size_t)size + 1);
    if (!buf) {
        close(fd);
        return mg__fail(err, errlen, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < (size_t)size) {  /* a file that shrinks meanwhile ends the loop early */
        ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            MG_FREE(buf);
            return mg__fail(err, errlen, "%s: cannot read: %s", path, strerror(e));
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *data = buf;
    *len = got;
    return 0;
}
static int mg__is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---------------------------------------------------------------------------------------------
   3. Atomic files and directories (implemented first: every writer below builds on them)
   ------------------------------------------------------------------------------------------ */

/* fsync of the directory holding path, so that a rename inside it is durable.              */
static int mg__fsync_parent(const char *path, char *err, size_t errlen) {
    char dir[MG_PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
    } else {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1;  /* "/name" -> "/" */
        if (n >= sizeof dir) return mg__fail(err, errlen, "%s: path too long", path);
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY);
    if (fd < 0) return mg__fail(err, errlen, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    /* Some filesystems do not support fsync on directories (EINVAL): nothing more to do.  */
    if (rc != 0 && errno != EINVAL)
        return mg__fail(err, errlen, "%s: fsync failed: %s", dir, strerror(errno));
    return 0;
}

static int mg__write_all(int fd, int64_t offset, const void *data, size_t n) {
    const char *p = (const char *)data;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)offset);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w; n -= (size_t)w; offset += w;
    }
    return 0;
}

/* The name of the temporary twin of path: PATH.tmp.<tag or pid>.                           */
static int mg__tmp_name(char *out, size_t cap, const char *path, const char *tag) {
    int n = tag ? snprintf(out, cap, "%s.tmp.%s", path, tag)
                : snprintf(out, cap, "%s.tmp.%ld", path, (long)getpid());
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

MGDEF int mg_pfile_begin(mg_pfile *f, const char *path, const char *tag, int create, int64_t size,
                         const void *header, size_t header_len, char *err, size_t errlen) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (strlen(path) >= sizeof f->path || mg__tmp_name(f->tmp, sizeof f->tmp, path, tag) != 0)
        return mg__fail(err, errlen, "%s: path too long", path);
    if (size < 0 || (int64_t)header_len > size)
        return mg__fail(err, errlen, "%s: header (%zu bytes) larger than the file (%lld)", path,
                        header_len, (long long)size);
    strcpy(f->path, path);
    f->size = size;
    f->creator = create != 0;
    if (create) {
        f->fd = open(f->tmp, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (f->fd < 0) return mg__fail(err, errlen, "%s: cannot create: %s", f->tmp, strerror(errno));
        if (ftruncate(f->fd, (off_t)size) != 0 ||
            (header_len && mg__write_all(f->fd, 0, header, header_len) != 0)) {
            int e = errno;
            mg_pfile_abort(f);
            return mg__fail(err, errlen, "%s: cannot write: %s", path, strerror(e));
        }
        return 0;
    }
    f->fd = open(f->tmp, O_RDWR);
    if (f->fd < 0)
        return mg__fail(err, errlen, "%s: cannot open (the creator must begin first): %s", f->tmp,
                        strerror(errno));
    struct stat st;
    if (fstat(f->fd, &st) != 0 || (int64_t)st.st_size != size) {
        mg_pfile_abort(f);
        return mg__fail(err, errlen, "%s: has %lld bytes, this process expects %lld", path,
                        (long long)st.st_size, (long long)size);
    }
    if (header_len) { /* the joiner must agree with the creator on the layout */
        unsigned char *mine = (unsigned char *)mg__alloc(header_len);
        int same = mine && pread(f->fd, mine, header_len, 0) == (ssize_t)header_len &&
                   memcmp(mine, header, header_len) == 0;
        MG_FREE(mine);
        if (!same) {
            mg_pfile_abort(f);
            return mg__fail(err, errlen, "%s: header differs from this process's layout", f->tmp);
        }
    }
    return 0;
}

MGDEF int mg_pfile_write(mg_pfile *f, int64_t offset, const void *data, size_t n, char *err,
                         size_t errlen) {
    int64_t end;
    if (f->fd < 0) return mg__fail(err, errlen, "%s: file is not open", f->path);
    if (offset < 0 || !mg__add(offset, (int64_t)n, &end) || end > f->size)
        return mg__fail(err, errlen, "%s: write of %zu bytes at %lld is past the end (%lld)",
                        f->path, n, (long long)offset, (long long)f->size);
    if (mg__write_all(f->fd, offset, data, n) != 0)
        return mg__fail(err, errlen, "%s: write failed: %s", f->path, strerror(errno));
    return 0;
}

MGDEF int mg_pfile_close(mg_pfile *f, char *err, size_t errlen) {
    if (f->fd < 0) return mg__fail(err, errlen, "%s: file is not open", f->path);
    int rc = fsync(f->fd), e = errno;
    close(f->fd);
    f->fd = -1;
    return rc ? mg__fail(err, errlen, "%s: fsync failed: %s", f->tmp, strerror(e)) : 0;
}

MGDEF int mg_pfile_commit(mg_pfile *f, char *err, size_t errlen) {
    if (!f->creator) return mg__fail(err, errlen, "%s: only the creator commits", f->path);
    if (mg_pfile_close(f, err, errlen) != 0) { unlink(f->tmp); return -1; }
    if (rename(f->tmp, f->path) != 0) {
        int e = errno;
        unlink(f->tmp);
        return mg__fail(err, errlen, "%s: rename failed: %s", f->path, strerror(e));
    }
    return mg__fsync_parent(f->path, err, errlen);
}

MGDEF void mg_pfile_abort(mg_pfile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (f->creator && f->tmp[0]) unlink(f->tmp);
}

MGDEF int mg_atomic_write(const char *path, const void *data, size_t n, char *err, size_t errlen) {
    mg_pfile f;
    if (mg_pfile_begin(&f, path, NULL, 1, (int64_t)n, data, n, err, errlen) != 0) return -1;
    return mg_pfile_commit(&f, err, errlen);
}

MGDEF FILE *mg_atomic_fopen(const char *path, char *tmp, size_t tmp_cap, char *err,
                            size_t errlen) {
    FILE *f;
    if (mg__tmp_name(tmp, tmp_cap, path, NULL) != 0) {
        mg__fail(err, errlen, "%s: path too long", path);
        return NULL;
    }
    if (!(f = fopen(tmp, "wb"))) mg__fail(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    return f;
}

MGDEF int mg_atomic_fclose(FILE *f, const char *tmp, const char *path, int commit, char *err,
                           size_t errlen) {
    /* fflush reports a full disk that buffered fprintf calls did not; ferror an earlier one */
    int e = 0;
    errno = 0;
    if (fflush(f) != 0 || ferror(f)) e = errno ? errno : EIO;
    else if (commit && fsync(fileno(f)) != 0) e = errno;
    if (fclose(f) != 0 && !e) e = errno ? errno : EIO;
    if (!commit || e) {
        unlink(tmp);
        return commit ? mg__fail(err, errlen, "%s: cannot write: %s", path, strerror(e)) : 0;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return mg__fail(err, errlen, "%s: cannot write (rename failed): %s", path, strerror(e));
    }
    return mg__fsync_parent(path, err, errlen);
}

MGDEF int mg_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* Removes a directory tree (no symlinks followed).                                          */
static void mg__remove_tree(const char *path, int depth) {
    struct stat st;
    if (depth > 64 || lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                size_t n = strlen(path) + strlen(e->d_name) + 2;
                char *child = (char *)mg__alloc(n);
                if (!child) continue;
                snprintf(child, n, "%s/%s", path, e->d_name);
                mg__remove_tree(child, depth + 1);
                MG_FREE(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

MGDEF int mg_atomic_dir_begin(const char *dir, const char *tag, char *tmp_dir, size_t tmp_cap,
                              char *err, size_t errlen) {
    if (mg__tmp_name(tmp_dir, tmp_cap, dir, tag) != 0)
        return mg__fail(err, errlen, "%s: path too long", dir);
    mg__remove_tree(tmp_dir, 0);  /* a leftover of a crashed run with the same tag */
    if (mkdir(tmp_dir, 0755) != 0)
        return mg__fail(err, errlen, "%s: cannot create directory: %s", tmp_dir, strerror(errno));
    return 0;
}

MGDEF int mg_atomic_dir_commit(const char *tmp_dir, const char *dir, char *err, size_t errlen) {
    int fd = open(tmp_dir, O_RDONLY);
    if (fd < 0) return mg__fail(err, errlen, "%s: cannot open: %s", tmp_dir, strerror(errno));
    fsync(fd);
    close(fd);
    struct stat st;
    if (stat(dir, &st) != 0) {               /* nothing to replace: one rename */
        if (rename(tmp_dir, dir) != 0)
            return mg__fail(err, errlen, "%s: rename failed: %s", dir, strerror(errno));
        return mg__fsync_parent(dir, err, errlen);
    }
    if (!S_ISDIR(st.st_mode)) return mg__fail(err, errlen, "%s: exists and is not a directory", dir);
    int swapped = 0;
#if defined(__linux__) && defined(SYS_renameat2) && (defined(_GNU_SOURCE) || defined(_DEFAULT_SOURCE))
    /* RENAME_EXCHANGE (2): both names stay valid at every instant; tmp_dir then holds the old. */
    swapped = syscall(SYS_renameat2, AT_FDCWD, tmp_dir, AT_FDCWD, dir, 2) == 0;
#endif
    if (swapped) {
        if (mg__fsync_parent(dir, err, errlen) != 0) return -1;
        mg__remove_tree(tmp_dir, 0);
        return 0;
    }
    /* Fallback: move the old one aside, put the new one in place, delete the old one.      */
    char old[MG_PATH_MAX];
    if (snprintf(old, sizeof old, "%s.old.%ld", dir, (long)getpid()) >= (int)sizeof old)
        return mg__fail(err, errlen, "%s: path too long", dir);
    if (rename(dir, old) != 0)
        return mg__fail(err, errlen, "%s: cannot move aside: %s", dir, strerror(errno));
    if (rename(tmp_dir, dir) != 0) {
        int e = errno;
        rename(old, dir);
        return mg__fail(err, errlen, "%s: rename failed: %s", dir, strerror(e));
    }
    if (mg__fsync_parent(dir, err, errlen) != 0) return -1;
    mg__remove_tree(old, 0);
    return 0;
}

MGDEF void mg_atomic_dir_abort(const char *tmp_dir) { mg__remove_tree(tmp_dir, 0); }

/* ---------------------------------------------------------------------------------------------
   1. Token datasets
   ------------------------------------------------------------------------------------------ */
#define MG__IDX_MAGIC "MMIDIDX\0\0"
#define MG__IDX_HEADER 34      /* magic 9 + version 8 + dtype 1 + S 8 + D 8                */
#define MG__LLMC_CKPT_MAGIC 20240326
#define MG__LLMC_EVAL_MAGIC 20240522   /* llm.c's data_common.py write_evalfile             */

/* llm.c's token file kinds, indexed by mg_llmc_tokens_kind: llm.c's dev/data/data_common.py
   HEADERS_INFO (magic, version, token dtype), which write_datafile puts in header[0], [1]
   with the token count in [2]; doc_start is the token its data scripts put before every
   document (dev/data/fineweb.py: GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|>).        */
static const struct mg__llmc_tokens_info {
    int32_t magic, version;
    int token_bytes;
    mg_idx_dtype dtype;
    int64_t doc_start;
    const char *name;
} mg__llmc_tokens_kinds[2] = {
    {20240520, 1, 2, MG_IDX_U16, MG_LLMC_EOT, "GPT-2"},
    {20240801, 7, 4, MG_TOKEN_U32, MG_LLMC_LLAMA3_BOT, "Llama-3"},
};
/* The kind whose magic a file starts with, or NULL.                                         */
static const struct mg__llmc_tokens_info *mg__llmc_tokens_kind_of(int32_t magic) {
    for (int k = 0; k < 2; k++)
        if (mg__llmc_tokens_kinds[k].magic == magic) return &mg__llmc_tokens_kinds[k];
    return NULL;
}
/* What an llm.c file that holds no token stream is, by its magic; NULL for any other magic. */
static const char *mg__llmc_other_file(int32_t magic) {
    if (magic == MG__LLMC_CKPT_MAGIC) return "an llm.c model checkpoint";
    if (magic == MG__LLMC_EVAL_MAGIC)
        return "an llm.c evaluation file (magic 20240522: multiple-choice examples, as llm.c's "
               "dev/data/hellaswag.py and mmlu.py write them)";
    return NULL;
}

/* Bytes per element of a Megatron dtype code; 0 for an unknown code.                       */
static int mg__idx_size(int code) {
    static const int size[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return code >= 1 && code <= 8 ? size[code] : 0;
}
static const char *mg__idx_name(int code) {
    static const char *name[9] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64",
                                  "float32", "uint16"};
    return code >= 1 && code <= 8 ? name[code] : "?";
}
/* Element i of integer token storage, widened.                                              */
static int64_t mg__load_token(const unsigned char *base, mg_idx_dtype dt, int64_t i) {
    switch (dt) {
    case MG_IDX_U8: return base[i];
    case MG_IDX_I8: return (int8_t)base[i];
    case MG_IDX_I16: return (int16_t)mg__ld16(base + 2 * i);
    case MG_IDX_U16: return mg__ld16(base + 2 * i);
    case MG_TOKEN_U32: return mg__ld32(base + 4 * i);
    case MG_IDX_I32: return mg__ldi32(base + 4 * i);
    case MG_IDX_I64: return mg__ldi64(base + 8 * i);
    default: return 0;  /* float codes are rejected at open */
    }
}

MGDEF int32_t mg_dataset_seq_len(const mg_dataset *ds, int64_t i) {
    return mg__ldi32(ds->mg__lengths + 4 * i);
}
MGDEF int64_t mg_dataset_seq_start(const mg_dataset *ds, int64_t i) {
    return mg__ldi64(ds->mg__pointers + 8 * i) / ds->token_size;
}
MGDEF int64_t mg_dataset_doc_bound(const mg_dataset *ds, int64_t d) {
    return mg__ldi64(ds->mg__docs + 8 * d);
}
/* Mock data: the sequence holding token i (binary search of the starts), and its tokens.   */
static int64_t mg__mock_seq_of(const mg_dataset *ds, int64_t i) {
    int64_t lo = 0, hi = ds->n_sequences - 1;
    while (lo < hi) {   /* the last sequence starting at or before i */
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (mg_dataset_seq_start(ds, mid) <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
/* Token `offset` of a mock sequence of `length` tokens: 1 + offset mod vocab, eod last.    */
static int64_t mg__mock_token(const mg_dataset *ds, int64_t offset, int64_t length) {
    return offset == length - 1 ? ds->mg__mock_eod : (offset + 1) % ds->mg__mock_vocab;
}
MGDEF int64_t mg_dataset_token(const mg_dataset *ds, int64_t i) {
    if (ds->format == MG_DATA_MOCK) {
        int64_t s = mg__mock_seq_of(ds, i);
        return mg__mock_token(ds, i - mg_dataset_seq_start(ds, s), mg_dataset_seq_len(ds, s));
    }
    return mg__load_token(ds->mg__tokens, ds->token_dtype, i);
}
MGDEF void mg_dataset_token_range(const mg_dataset *ds, int64_t *min_token, int64_t *max_token) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    if (ds->format == MG_DATA_MOCK) {   /* per sequence, from its length: no pass over tokens */
        for (int64_t s = 0; s < ds->n_sequences; s++) {
            int64_t n = mg_dataset_seq_len(ds, s) - 1;   /* tokens before the eod */
            int64_t a = n >= ds->mg__mock_vocab ? 0 : 1;
            int64_t b = n >= ds->mg__mock_vocab ? ds->mg__mock_vocab - 1 : n;
            if (n >= 1 && a < lo) lo = a;
            if (n >= 1 && b > hi) hi = b;
        }
        if (ds->n_sequences && ds->mg__mock_eod < lo) lo = ds->mg__mock_eod;
        if (ds->n_sequences && ds->mg__mock_eod > hi) hi = ds->mg__mock_eod;
    }
    for (int64_t i = 0; ds->format != MG_DATA_MOCK && i < ds->n_tokens; i++) {
        int64_t t = mg__load_token(ds->mg__tokens, ds->token_dtype, i);
        if (t < lo) lo = t;
        if (t > hi) hi = t;
    }
    if (min_token) *min_token = lo;
    if (max_token) *max_token = hi;
}

MGDEF void mg_dataset_close(mg_dataset *ds) {
    for (int k = 0; k < 2; k++) mg__unmap(ds->mg__map[k], ds->mg__map_len[k]);
    MG_FREE(ds->mg__owned);
    memset(ds, 0, sizeof *ds);
}

/* PREFIX.idx + PREFIX.bin. Checks, in order: header length, magic, version, dtype, the file
   size against S and D, the document index (0, non-decreasing, ends at S), lengths >= 0,
   pointers contiguous from 0 (pointer[i+1] = pointer[i] + length[i]·size), and the .bin size
   against the last pointer. Everything the sampler later reads is therefore in bounds.      */
static int mg__open_indexed(const char *prefix, mg_dataset *ds, char *err, size_t errlen) {
    char idx[1100], bin[1100];
    if (snprintf(idx, sizeof idx, "%s.idx", prefix) >= (int)sizeof idx ||
        snprintf(bin, sizeof bin, "%s.bin", prefix) >= (int)sizeof bin)
        return mg__fail(err, errlen, "%s: path too long", prefix);
    void *map; size_t len;
    if (mg__map_header(idx, MG__IDX_HEADER, &map, &len, err, errlen) != 0) return -1;
    ds->mg__map[0] = map; ds->mg__map_len[0] = len;
    const unsigned char *p = (const unsigned char *)map;
    if (memcmp(p, MG__IDX_MAGIC, 9) != 0)
        return mg__fail(err, errlen, "%s: bad magic (not a Megatron indexed dataset index)", idx);
    uint64_t version = mg__ld64(p + 9);
    if (version != 1)
        return mg__fail(err, errlen, "%s: unsupported version %llu (expected 1)", idx,
                        (unsigned long long)version);
    int code = p[17];
    ds->token_size = mg__idx_size(code);
    if (!ds->token_size) return mg__fail(err, errlen, "%s: unknown dtype code %d", idx, code);
    if (code == MG_IDX_F32 || code == MG_IDX_F64)
        return mg__fail(err, errlen, "%s: token dtype %s is not an integer type", idx,
                        mg__idx_name(code));
    ds->token_dtype = (mg_idx_dtype)code;
    uint64_t S = mg__ld64(p + 18), D = mg__ld64(p + 26);
    /* Expected size 34 + 12·S + 8·D (+ S bytes of sequence_modes in multimodal files).     */
    uint64_t cap = (uint64_t)1 << 56;
    if (S > cap || D > cap)
        return mg__fail(err, errlen, "%s: header claims %llu sequences and %llu document entries,"
                        " more than the file (%zu bytes) can hold", idx, (unsigned long long)S,
                        (unsigned long long)D, len);
    uint64_t need = MG__IDX_HEADER + 12 * S + 8 * D;
    if (len != need && len != need + S)
        return mg__fail(err, errlen, "%s: %s: %zu bytes, but %llu sequences and %llu document "
                        "entries need %llu", idx, len < need ? "truncated" : "size mismatch", len,
                        (unsigned long long)S, (unsigned long long)D, (unsigned long long)need);
    ds->n_sequences = (int64_t)S;
    ds->mg__lengths = p + MG__IDX_HEADER;
    ds->mg__pointers = ds->mg__lengths + 4 * S;
    ds->mg__docs = ds->mg__pointers + 8 * S;
    if (D < 1 || mg_dataset_doc_bound(ds, 0) != 0)
        return mg__fail(err, errlen, "%s: document index must start with 0", idx);
    for (uint64_t d = 1; d < D; d++)
        if (mg_dataset_doc_bound(ds, (int64_t)d) < mg_dataset_doc_bound(ds, (int64_t)d - 1))
            return mg__fail(err, errlen, "%s: document index decreases at entry %llu", idx,
                            (unsigned long long)d);
    if (mg_dataset_doc_bound(ds, (int64_t)D - 1) != (int64_t)S)
        return mg__fail(err, errlen, "%s: document index ends at %lld, not at the sequence "
                        "count %llu", idx, (long long)mg_dataset_doc_bound(ds, (int64_t)D - 1),
                        (unsigned long long)S);
    ds->n_documents = (int64_t)D - 1;
    int64_t offset = 0;  /* bytes of .bin covered by sequences 0..i-1 */
    for (int64_t i = 0; i < (int64_t)S; i++) {
        int32_t n = mg_dataset_seq_len(ds, i);
        if (n < 0)
            return mg__fail(err, errlen, "%s: sequence %lld has negative length %d", idx,
                            (long long)i, n);
        int64_t ptr = mg__ldi64(ds->mg__pointers + 8 * i);
        if (ptr != offset)
            return mg__fail(err, errlen, "%s: sequence %lld points to byte %lld, but the lengths "
                            "before it end at byte %lld", idx, (long long)i, (long long)ptr,
                            (long long)offset);
        if (!mg__add(offset, (int64_t)n * ds->token_size, &offset))
            return mg__fail(err, errlen, "%s: sequence lengths add up to more than 2^63 bytes",
                            idx);
    }
    if (mg__map_file(bin, &map, &len, err, errlen) != 0) return -1;
    ds->mg__map[1] = map; ds->mg__map_len[1] = len;
    if ((int64_t)len != offset)
        return mg__fail(err, errlen, "%s: %s: %zu bytes, but the index describes %lld", bin,
                        (int64_t)len < offset ? "truncated" : "size mismatch", len,
                        (long long)offset);
    ds->mg__tokens = (const unsigned char *)map;
    ds->n_tokens = offset / ds->token_size;
    ds->format = MG_DATA_INDEXED;
    return 0;
}

/* An index built in memory (llm.c, mock): S sequences, each its own document, in the .idx
   layout lengths int32[S] | pointers int64[S] | documents int64[S+1]; the dataset owns it. */
static void mg__index_in_memory(mg_dataset *ds, unsigned char *idx, int64_t S) {
    ds->mg__owned = idx;
    ds->mg__lengths = idx;
    ds->mg__pointers = idx + 4 * S;
    ds->mg__docs = idx + 12 * S;
    ds->n_sequences = S;
    ds->n_documents = S;
}

/* llm.c token file, either kind, checked as llm.c's readers check it (GPT-2: llmc/
   dataloader.h dataloader_load_shard_; Llama-3: train_llama3.py _load_data_shard): magic,
   version, then the file size against 1024 + N·token bytes (N = 0 fails in mg_dataset_open
   as an empty dataset, as llm.c's assert(ntok > 0)). Sequences start at offset 0 and at every
   doc_start token of the kind; each is one document. The index arrays are built in memory, in
   the .idx layout.                                                                          */
static int mg__open_llmc_tokens(const char *path, mg_dataset *ds, char *err, size_t errlen) {
    void *map; size_t len;
    if (mg__map_header(path, MG_LLMC_HEADER_BYTES, &map, &len, err, errlen) != 0) return -1;
    ds->mg__map[0] = map; ds->mg__map_len[0] = len;
    const unsigned char *p = (const unsigned char *)map;
    int32_t magic = mg__ldi32(p), version = mg__ldi32(p + 4), n = mg__ldi32(p + 8);
    const struct mg__llmc_tokens_info *kind = mg__llmc_tokens_kind_of(magic);
    if (!kind)   /* mg_dataset_open saw a token magic: the file changed since */
        return mg__fail(err, errlen, "%s: bad magic %d (llm.c token files have %d or %d)", path,
                        magic, mg__llmc_tokens_kinds[0].magic, mg__llmc_tokens_kinds[1].magic);
    if (version != kind->version)
        return mg__fail(err, errlen, "%s: llm.c %s token file (magic %d) of unsupported version "
                        "%d (llm.c writes version %d)", path, kind->name, magic, version,
                        kind->version);
    if (n < 0) return mg__fail(err, errlen, "%s: negative token count %d", path, n);
    uint64_t need = MG_LLMC_HEADER_BYTES + (uint64_t)kind->token_bytes * (uint64_t)n;
    if (len != need)
        return mg__fail(err, errlen, "%s: %s: %zu bytes, but %d %s tokens (%d bytes each) need "
                        "%llu", path, len < need ? "truncated" : "size mismatch", len, n,
                        kind->name, kind->token_bytes, (unsigned long long)need);
    ds->mg__tokens = p + MG_LLMC_HEADER_BYTES;
    ds->token_dtype = kind->dtype;
    ds->token_size = kind->token_bytes;
    ds->n_tokens = n;
    int64_t S = 0;
    for (int64_t i = 0; i < n; i++)
        if (i == 0 || mg__load_token(ds->mg__tokens, ds->token_dtype, i) == kind->doc_start) S++;
    /* lengths int32[S] | pointers int64[S] | documents int64[S+1]                            */
    unsigned char *idx = (unsigned char *)mg__alloc((size_t)(S * 20 + 8));
    if (!idx) return mg__fail(err, errlen, "%s: out of memory for the index", path);
    ds->mg__owned = idx;
    int64_t s = -1, start = 0;
    for (int64_t i = 0; i <= n; i++) {
        int boundary = i == n || (i > 0 && mg__load_token(ds->mg__tokens, ds->token_dtype, i) ==
                                              kind->doc_start);
        if (i > 0 && boundary) { /* close sequence s = [start, i) */
            int32_t length = (int32_t)(i - start);
            int64_t ptr = kind->token_bytes * start, doc = s + 1;
            memcpy(idx + 4 * s, &length, 4);
            memcpy(idx + 4 * S + 8 * s, &ptr, 8);
            memcpy(idx + 12 * S + 8 * (s + 1), &doc, 8);
        }
        if (i == 0 || boundary) { s++; start = i; }
    }
    int64_t zero = 0;
    memcpy(idx + 12 * S, &zero, 8);
    mg__index_in_memory(ds, idx, S);
    ds->format = MG_DATA_LLMC_TOKENS;
    return 0;
}

/* The mock dataset: the lengths drawn as numpy's default_rng(0).integers(1, 4096, 100000,
   dtype=int32) draws them, the index arrays in the .idx layout (pointers in tokens: the
   token size reads as 1).                                                                   */
MGDEF int mg_dataset_open_mock(mg_dataset *ds, int64_t vocab_size, int64_t eod, char *err,
                               size_t errlen) {
    const int64_t S = MG_MOCK_SEQUENCES;
    memset(ds, 0, sizeof *ds);
    snprintf(ds->path, sizeof ds->path, "mock data");
    if (vocab_size < 1 || vocab_size > INT32_MAX)
        return mg__fail(err, errlen, "mock data: a vocabulary of %lld ids (1 … 2^31 − 1)",
                        (long long)vocab_size);
    if (eod < 0 || eod >= vocab_size)
        return mg__fail(err, errlen, "mock data: end-of-document id %lld outside the vocabulary "
                        "(0 … %lld)", (long long)eod, (long long)vocab_size - 1);
    unsigned char *idx = (unsigned char *)mg__alloc((size_t)(S * 20 + 8));
    if (!idx) return mg__fail(err, errlen, "mock data: out of memory for the index");
    mg_pcg64 g;
    mg_pcg64_seed(&g, 0);
    int64_t ptr = 0;
    for (int64_t s = 0; s <= S; s++) {
        memcpy(idx + 12 * S + 8 * s, &s, 8);   /* document s = sequence s */
        if (s == S) break;
        int32_t length = 1 + (int32_t)mg_pcg64_bounded32(&g, MG_MOCK_MAX_LEN - 2);
        memcpy(idx + 4 * s, &length, 4);
        memcpy(idx + 4 * S + 8 * s, &ptr, 8);
        ptr += length;
    }
    mg__index_in_memory(ds, idx, S);
    ds->mg__mock_vocab = vocab_size;
    ds->mg__mock_eod = eod;
    ds->format = MG_DATA_MOCK;
    ds->token_dtype = MG_IDX_I64;
    ds->token_size = 1;
    ds->n_tokens = ptr;
    return 0;
}

/* Tells the format by the bytes: PATH.idx -> indexed; a file starting with an llm.c token
   magic (either kind) -> llm.c; PREFIX.bin or PREFIX with a PREFIX.idx beside it -> indexed. */
MGDEF int mg_dataset_open(const char *path, mg_dataset *ds, char *err, size_t errlen) {
    memset(ds, 0, sizeof *ds);
    if (!path) return mg__fail(err, errlen, "mg_dataset_open: path is NULL");
    snprintf(ds->path, sizeof ds->path, "%s", path);
    char prefix[1100], idx[1110];
    unsigned char head[9];
    size_t n = strlen(path);
    if (n + 8 >= sizeof prefix) return mg__fail(err, errlen, "%s: path too long", path);
    strcpy(prefix, path);
    if (mg__ends_with(path, ".idx") || mg__ends_with(path, ".bin")) prefix[n - 4] = 0;
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    char why[MG_ERRLEN] = "";  /* why the path itself cannot be read, if it cannot        */
    int64_t got = mg_read_head(path, head, sizeof head, why, sizeof why);
    struct stat st;
    int rc;
    if (mg__ends_with(path, ".idx")) {
        rc = mg__open_indexed(prefix, ds, err, errlen);
    } else if (got >= 4 && mg__llmc_tokens_kind_of(mg__ldi32(head))) {
        rc = mg__open_llmc_tokens(path, ds, err, errlen);
    } else if (mg__is_file(idx)) {
        rc = mg__open_indexed(prefix, ds, err, errlen);
    } else if (stat(idx, &st) == 0) {   /* there, but a directory, a pipe, … */
        rc = mg__fail(err, errlen, "%s: %s is %s, not an index file (a dataset is PREFIX.idx + "
                      "PREFIX.bin, two regular files)", path, idx,
                      S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    } else if (got >= 4 && mg__llmc_other_file(mg__ldi32(head))) {
        rc = mg__fail(err, errlen, "%s: this is %s, not token data", path,
                      mg__llmc_other_file(mg__ldi32(head)));
    } else if (got >= 9 && memcmp(head, MG__IDX_MAGIC, 9) == 0) {
        rc = mg__fail(err, errlen, "%s: a Megatron index under another name; pass its prefix "
                      "(PREFIX.idx + PREFIX.bin)", path);
    } else if (got >= 0) {
        rc = mg__fail(err, errlen, "%s: neither an llm.c token file (magic %d or %d) nor part "
                      "of a Megatron indexed dataset (%s not found)", path,
                      mg__llmc_tokens_kinds[0].magic, mg__llmc_tokens_kinds[1].magic, idx);
    } else if (stat(path, &st) != 0 && errno == ENOENT) {
        char bin[1110];       /* an llm.c file named without its .bin: name it in full */
        snprintf(bin, sizeof bin, "%s.bin", prefix);
        rc = mg__is_file(bin) && !mg__ends_with(path, ".bin")
             ? mg__fail(err, errlen, "%s: no such dataset (neither that file nor %s exists; %s "
                        "does: an llm.c token file is given by its full name)", path, idx, bin)
             : mg__fail(err, errlen, "%s: no such dataset (neither that file nor %s exists)",
                        path, idx);
    } else if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        rc = mg__fail(err, errlen, "%s: is a directory; a dataset is a file or a prefix (PREFIX "
                      "for PREFIX.idx + PREFIX.bin), and %s does not exist", path, idx);
    } else {
        rc = mg__fail(err, errlen, "%s", why);  /* exists but unreadable: permission, a pipe */
    }
    if (rc == 0 && ds->n_tokens == 0)
        rc = mg__fail(err, errlen, "%s: empty dataset (no tokens)", path);
    if (rc != 0) {
        mg_dataset_close(ds);
        return -1;
    }
    return 0;
}

/* Indexed dataset writer ------------------------------------------------------------------ */
/* Grows a malloc'd array to hold at least need elements of size elt (no realloc: MG_MALLOC). */
static int mg__grow(void **arr, int64_t *cap, int64_t need, size_t elt) {
    if (need <= *cap) return 0;
    int64_t ncap = *cap ? *cap : 256;
    while (ncap < need) ncap *= 2;
    void *p = mg__alloc((size_t)ncap * elt);
    if (!p) return -1;
    if (*arr) memcpy(p, *arr, (size_t)*cap * elt);
    MG_FREE(*arr);
    *arr = p;
    *cap = ncap;
    return 0;
}
/* Range of tokens an integer dtype holds.                                                   */
static void mg__idx_limits(mg_idx_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case MG_IDX_U8: *lo = 0; *hi = 255; break;
    case MG_IDX_I8: *lo = -128; *hi = 127; break;
    case MG_IDX_I16: *lo = -32768; *hi = 32767; break;
    case MG_IDX_U16: *lo = 0; *hi = 65535; break;
    default: *lo = INT32_MIN; *hi = INT32_MAX; break;  /* int32 input fits int32 and int64 */
    }
}
static void mg__store_token(unsigned char *base, mg_idx_dtype dt, int64_t i, int64_t v) {
    switch (dt) {
    case MG_IDX_U8: case MG_IDX_I8: base[i] = (unsigned char)v; break;
    case MG_IDX_I16: case MG_IDX_U16: { uint16_t x = (uint16_t)v; memcpy(base + 2 * i, &x, 2); } break;
    case MG_IDX_I32: { int32_t x = (int32_t)v; memcpy(base + 4 * i, &x, 4); } break;
    default: memcpy(base + 8 * i, &v, 8); break;
    }
}

MGDEF int mg_idx_writer_begin(mg_idx_writer *w, const char *prefix, mg_idx_dtype dtype,
                              char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (!mg__idx_size(dtype) || dtype == MG_IDX_F32 || dtype == MG_IDX_F64)
        return mg__fail(err, errlen, "%s: token dtype code %d is not an integer type", prefix,
                        (int)dtype);
    char bin[420];
    if (strlen(prefix) >= sizeof w->prefix || snprintf(bin, sizeof bin, "%s.bin", prefix) >=
        (int)sizeof bin || mg__tmp_name(w->bin_tmp, sizeof w->bin_tmp, bin, NULL) != 0)
        return mg__fail(err, errlen, "%s: path too long", prefix);
    strcpy(w->prefix, prefix);
    w->dtype = dtype;
    if (mg__grow((void **)&w->docs, &w->cap_docs, 1, 8) != 0)
        return mg__fail(err, errlen, "%s: out of memory", prefix);
    w->docs[w->n_docs++] = 0;
    w->fd = open(w->bin_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (w->fd < 0) {
        int e = errno;
        mg_idx_writer_abort(w);
        return mg__fail(err, errlen, "%s: cannot create: %s", bin, strerror(e));
    }
    return 0;
}

MGDEF int mg_idx_writer_add(mg_idx_writer *w, const int32_t *tokens, int64_t n, char *err,
                            size_t errlen) {
    int64_t lo, hi;
    unsigned char chunk[8 * 1024];
    int size = mg__idx_size(w->dtype), per = (int)sizeof chunk / size;
    if (w->fd < 0) return mg__fail(err, errlen, "%s: writer is not open", w->prefix);
    if (n < 0 || n > INT32_MAX)
        return mg__fail(err, errlen, "%s: sequence length %lld out of range", w->prefix,
                        (long long)n);
    if (!tokens && n > 0)
        return mg__fail(err, errlen, "%s: mg_idx_writer_add: tokens is NULL with %lld tokens",
                        w->prefix, (long long)n);
    mg__idx_limits(w->dtype, &lo, &hi);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < lo || tokens[i] > hi)
            return mg__fail(err, errlen, "%s: token %d does not fit dtype %s", w->prefix,
                            tokens[i], mg__idx_name(w->dtype));
    if (mg__grow((void **)&w->lengths, &w->cap_seq, w->n_seq + 1, 4) != 0)
        return mg__fail(err, errlen, "%s: out of memory", w->prefix);
    for (int64_t i = 0; i < n; i += per) {
        int64_t m = n - i < per ? n - i : per;
        for (int64_t j = 0; j < m; j++) mg__store_token(chunk, w->dtype, j, tokens[i + j]);
        if (mg__write_all(w->fd, (w->n_tokens + i) * size, chunk, (size_t)(m * size)) != 0)
            return mg__fail(err, errlen, "%s.bin: write failed: %s", w->prefix, strerror(errno));
    }
    w->lengths[w->n_seq++] = (int32_t)n;
    w->n_tokens += n;
    return 0;
}

MGDEF void mg_idx_writer_end_document(mg_idx_writer *w) {
    if (mg__grow((void **)&w->docs, &w->cap_docs, w->n_docs + 1, 8) != 0) {
        w->out_of_memory = 1;
        return;
    }
    w->docs[w->n_docs++] = w->n_seq;
}

/* Both files complete under temporary names: the .bin synced and closed, the .idx written
   and synced. Nothing is renamed yet.                                                      */
MGDEF int mg_idx_writer_prepare(mg_idx_writer *w, char *err, size_t errlen) {
    char idx[420];
    if (w->fd < 0) return mg__fail(err, errlen, "%s: writer is not open", w->prefix);
    if (w->docs[w->n_docs - 1] != w->n_seq) mg_idx_writer_end_document(w);
    if (w->out_of_memory) {
        mg_idx_writer_abort(w);
        return mg__fail(err, errlen, "%s: out of memory", w->prefix);
    }
    if (w->n_tokens == 0) {
        mg_idx_writer_abort(w);
        return mg__fail(err, errlen, "%s: no tokens to write (empty dataset)", w->prefix);
    }
    snprintf(idx, sizeof idx, "%s.idx", w->prefix);
    if (mg__tmp_name(w->idx_tmp, sizeof w->idx_tmp, idx, NULL) != 0) {
        mg_idx_writer_abort(w);
        return mg__fail(err, errlen, "%s: path too long", idx);
    }
    int64_t S = w->n_seq, D = w->n_docs;
    size_t n = (size_t)(MG__IDX_HEADER + 12 * S + 8 * D);
    unsigned char *buf = (unsigned char *)mg__alloc(n);
    if (!buf) { mg_idx_writer_abort(w); return mg__fail(err, errlen, "%s: out of memory", w->prefix); }
    uint64_t version = 1, s64 = (uint64_t)S, d64 = (uint64_t)D;
    memcpy(buf, MG__IDX_MAGIC, 9);
    memcpy(buf + 9, &version, 8);
    buf[17] = (unsigned char)w->dtype;
    memcpy(buf + 18, &s64, 8);
    memcpy(buf + 26, &d64, 8);
    memcpy(buf + MG__IDX_HEADER, w->lengths, (size_t)(4 * S));
    int64_t ptr = 0;
    for (int64_t i = 0; i < S; i++) {
        memcpy(buf + MG__IDX_HEADER + 4 * S + 8 * i, &ptr, 8);
        ptr += (int64_t)w->lengths[i] * mg__idx_size(w->dtype);
    }
    memcpy(buf + MG__IDX_HEADER + 12 * S, w->docs, (size_t)(8 * D));
    int rc = fsync(w->fd), e = errno;
    close(w->fd);
    w->fd = -1;
    w->prepared = 1;            /* from here abort removes both temporaries */
    if (rc != 0) {
        mg_idx_writer_abort(w);
        MG_FREE(buf);
        return mg__fail(err, errlen, "%s.bin: cannot write: %s", w->prefix, strerror(e));
    }
    int fd = open(w->idx_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    rc = fd < 0 || mg__write_all(fd, 0, buf, n) != 0 || fsync(fd) != 0;
    e = errno;
    if (fd >= 0 && close(fd) != 0 && !rc) {
        rc = 1;
        e = errno;
    }
    MG_FREE(buf);
    if (rc) {
        mg_idx_writer_abort(w);
        return mg__fail(err, errlen, "%s: cannot write: %s", idx, strerror(e));
    }
    return 0;
}

/* .bin first, then .idx. A reader that sees the new .bin beside an old .idx rejects the
   pair (size check), it never misreads it.                                                 */
MGDEF int mg_idx_writer_commit(mg_idx_writer *w, char *err, size_t errlen) {
    char bin[420], idx[420];
    int rc = 0;
    if (!w->prepared) return mg__fail(err, errlen, "%s: writer is not prepared", w->prefix);
    snprintf(bin, sizeof bin, "%s.bin", w->prefix);
    snprintf(idx, sizeof idx, "%s.idx", w->prefix);
    if (rename(w->bin_tmp, bin) != 0)
        rc = mg__fail(err, errlen, "%s: cannot write (rename failed): %s", bin, strerror(errno));
    else if (rename(w->idx_tmp, idx) != 0)
        rc = mg__fail(err, errlen, "%s: cannot write (rename failed): %s", idx, strerror(errno));
    else
        w->prepared = 0;        /* renamed: nothing of ours left to remove */
    if (rc == 0) rc = mg__fsync_parent(idx, err, errlen);
    mg_idx_writer_abort(w);     /* frees the arrays (and removes what was not renamed) */
    return rc;
}

MGDEF int mg_idx_writer_finish(mg_idx_writer *w, char *err, size_t errlen) {
    if (mg_idx_writer_prepare(w, err, errlen) != 0) return -1;
    return mg_idx_writer_commit(w, err, errlen);
}

MGDEF void mg_idx_writer_abort(mg_idx_writer *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->fd >= 0 || w->prepared) unlink(w->bin_tmp);
    if (w->prepared) unlink(w->idx_tmp);
    w->fd = -1;
    w->prepared = 0;
    MG_FREE(w->lengths);
    MG_FREE(w->docs);
    w->lengths = NULL;
    w->docs = NULL;
    w->n_seq = w->cap_seq = w->n_docs = w->cap_docs = 0;
}

/* llm.c token file writer ----------------------------------------------------------------- */
MGDEF int mg_llmc_tokens_write(const char *path, mg_llmc_tokens_kind kind, const int32_t *tokens,
                               int64_t n, char *err, size_t errlen) {
    int32_t header[256] = {0};
    unsigned char chunk[16384];
    mg_pfile f;
    if (kind != MG_LLMC_GPT2 && kind != MG_LLMC_LLAMA3)
        return mg__fail(err, errlen, "%s: unknown llm.c token file kind %d", path, (int)kind);
    const struct mg__llmc_tokens_info *info = &mg__llmc_tokens_kinds[kind];
    const int width = info->token_bytes, per = (int)sizeof chunk / width;
    /* llm.c's write_datafile: assert len(toks) < 2**31                                      */
    if (n < 0 || n > INT32_MAX)
        return mg__fail(err, errlen, "%s: token count %lld out of range", path, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (width == 2 && tokens[i] > 65535))
            return mg__fail(err, errlen, "%s: token %d does not fit %s (llm.c %s token file)",
                            path, tokens[i], width == 2 ? "uint16" : "uint32", info->name);
    header[0] = info->magic;
    header[1] = info->version;
    header[2] = (int32_t)n;
    if (mg_pfile_begin(&f, path, NULL, 1, MG_LLMC_HEADER_BYTES + (int64_t)width * n, header,
                       sizeof header, err, errlen) != 0)
        return -1;
    for (int64_t i = 0; i < n; i += per) {
        int64_t m = n - i < per ? n - i : per;
        for (int64_t j = 0; j < m; j++) {
            uint32_t t = (uint32_t)tokens[i + j];   /* little-endian, as the host (see top) */
            if (width == 2) { uint16_t t16 = (uint16_t)t; memcpy(chunk + 2 * j, &t16, 2); }
            else memcpy(chunk + 4 * j, &t, 4);
        }
        if (mg_pfile_write(&f, MG_LLMC_HEADER_BYTES + width * i, chunk, (size_t)(width * m), err,
                           errlen) != 0) {
            mg_pfile_abort(&f);
            return -1;
        }
    }
    return mg_pfile_commit(&f, err, errlen);
}

/* ---------------------------------------------------------------------------------------------
   2. Samplers
   ------------------------------------------------------------------------------------------ */

/* MT19937 exactly as numpy's legacy RandomState (numpy/random/src/mt19937). --------------- */
MGDEF void mg_mt19937_seed(mg_mt19937 *mt, uint32_t seed) {
    for (int i = 0; i < 624; i++) {
        mt->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1u;
    }
    mt->pos = 624;
}
static void mg__mt19937_refill(mg_mt19937 *mt) {
    const uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix = 0x9908b0dfu;
    int i;
    for (i = 0; i < 624 - 397; i++) {
        uint32_t y = (mt->key[i] & upper) | (mt->key[i + 1] & lower);
        mt->key[i] = mt->key[i + 397] ^ (y >> 1) ^ ((y & 1u) ? matrix : 0u);
    }
    for (; i < 623; i++) {
        uint32_t y = (mt->key[i] & upper) | (mt->key[i + 1] & lower);
        mt->key[i] = mt->key[i + 397 - 624] ^ (y >> 1) ^ ((y & 1u) ? matrix : 0u);
    }
    uint32_t y = (mt->key[623] & upper) | (mt->key[0] & lower);
    mt->key[623] = mt->key[396] ^ (y >> 1) ^ ((y & 1u) ? matrix : 0u);
    mt->pos = 0;
}
MGDEF uint32_t mg_mt19937_next32(mg_mt19937 *mt) {
    if (mt->pos == 624) mg__mt19937_refill(mt);
    uint32_t y = mt->key[mt->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}
/* numpy's random_interval: draw under the smallest all-ones mask >= max until <= max. Above
   2^32 - 1 it draws 64 bits as (first << 32 | second) word.                                 */
MGDEF uint64_t mg_mt19937_interval(mg_mt19937 *mt, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1; mask |= mask >> 2; mask |= mask >> 4;
    mask |= mask >> 8; mask |= mask >> 16; mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        while ((value = (mg_mt19937_next32(mt) & mask)) > max) {}
    } else {
        do {
            uint64_t hi = mg_mt19937_next32(mt);
            value = ((hi << 32) | mg_mt19937_next32(mt)) & mask;
        } while (value > max);
    }
    return value;
}
MGDEF int64_t mg_ix_get(mg_ix a, int64_t k) {
    return a.width == 4 ? (int64_t)((const uint32_t *)a.v)[k] : ((const int64_t *)a.v)[k];
}
static void mg__ix_set(mg_ix a, int64_t k, int64_t x) {
    if (a.width == 4) ((uint32_t *)a.v)[k] = (uint32_t)x;
    else ((int64_t *)a.v)[k] = x;
}
/* numpy RandomState.shuffle of y = the n entries x[first .. first + n) (a 1-D array): for
   i = n-1 down to 1, swap y[i], y[interval(i)]. The draws depend on n alone, not on the entry
   width: numpy shuffles an int32, uint32 or int64 array of one length the same. An int32
   array passes as width 4 (read and written as uint32, which keeps its bits).              */
static void mg__ix_shuffle(mg_mt19937 *mt, mg_ix x, int64_t first, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)mg_mt19937_interval(mt, (uint64_t)i);
        int64_t t = mg_ix_get(x, first + i);
        mg__ix_set(x, first + i, mg_ix_get(x, first + j));
        mg__ix_set(x, first + j, t);
    }
}
MGDEF void mg_mt19937_shuffle_i32(mg_mt19937 *mt, int32_t *x, int64_t n) {
    mg_ix a = {x, 4};
    mg__ix_shuffle(mt, a, 0, n);
}
MGDEF void mg_mt19937_shuffle_i64(mg_mt19937 *mt, int64_t *x, int64_t n) {
    mg_ix a = {x, 8};
    mg__ix_shuffle(mt, a, 0, n);
}

/* numpy.random.default_rng(seed): SeedSequence, then PCG64 (numpy/random/bit_generator.pyx,
   numpy/random/src/pcg64). 128-bit arithmetic on (high, low) 64-bit pairs. ---------------- */
/* SeedSequence's hashmix and mix (O'Neill's seed_seq_fe constants), 32-bit words.          */
static uint32_t mg__ss_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= 0x931e8875u;
    value *= *hash_const;
    return value ^ (value >> 16);
}
static uint32_t mg__ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = 0xca01f9ddu * x - 0x4973f715u * y;
    return r ^ (r >> 16);
}
/* hi:lo = a·b, 64 × 64 -> 128 bits.                                                         */
static void mg__mul64(uint64_t a, uint64_t b, uint64_t *hi, uint64_t *lo) {
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (mid << 32) | (p00 & 0xffffffffu);
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}
/* state = state · MULT + inc (mod 2^128), MULT = PCG's default 128-bit multiplier.          */
static void mg__pcg64_step(mg_pcg64 *g) {
    const uint64_t mult_hi = 2549297995355413924ull, mult_lo = 4865540595714422341ull;
    uint64_t hi, lo;
    mg__mul64(g->state_lo, mult_lo, &hi, &lo);
    hi += g->state_hi * mult_lo + g->state_lo * mult_hi;
    lo += g->inc_lo;
    hi += g->inc_hi + (lo < g->inc_lo);
    g->state_hi = hi;
    g->state_lo = lo;
}
MGDEF void mg_pcg64_seed(mg_pcg64 *g, uint64_t seed) {
    /* SeedSequence(seed): the entropy as 32-bit words, least significant first ([0] for 0),
       mixed into a pool of 4 words; then generate_state(4, uint64) = 8 words read as 4
       little-endian uint64: seed = (w[0], w[1]) as (high, low), increment = (w[2], w[3]).  */
    uint32_t entropy[2], pool[4], hash_const = 0x43b0d7e5u, words[8];
    uint64_t v[4];
    int n_entropy = 0, i, j;
    do { entropy[n_entropy++] = (uint32_t)seed; seed >>= 32; } while (seed);
    for (i = 0; i < 4; i++) pool[i] = mg__ss_hashmix(i < n_entropy ? entropy[i] : 0, &hash_const);
    for (i = 0; i < 4; i++)
        for (j = 0; j < 4; j++)
            if (i != j) pool[j] = mg__ss_mix(pool[j], mg__ss_hashmix(pool[i], &hash_const));
    hash_const = 0x8b51f9ddu;
    for (i = 0; i < 8; i++) {
        uint32_t w = pool[i % 4] ^ hash_const;
        hash_const *= 0x58f38dedu;
        w *= hash_const;
        words[i] = w ^ (w >> 16);
    }
    for (i = 0; i < 4; i++) v[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
    /* pcg_setseq_128_srandom_r(state = (v0, v1), initseq = (v2, v3)): inc = initseq·2 + 1,
       state = 0, step, state += seed, step                                                 */
    g->inc_hi = v[2] << 1 | v[3] >> 63;
    g->inc_lo = v[3] << 1 | 1u;
    g->state_hi = g->state_lo = 0;
    mg__pcg64_step(g);
    g->state_lo += v[1];
    g->state_hi += v[0] + (g->state_lo < v[1]);
    mg__pcg64_step(g);
    g->has_half = 0;
    g->half = 0;
}
/* Step, then XSL-RR: (high ^ low) rotated right by the state's top 6 bits.                  */
MGDEF uint64_t mg_pcg64_next64(mg_pcg64 *g) {
    mg__pcg64_step(g);
    uint64_t x = g->state_hi ^ g->state_lo;
    unsigned rot = (unsigned)(g->state_hi >> 58);
    return (x >> rot) | (x << ((64u - rot) & 63u));
}
MGDEF uint32_t mg_pcg64_next32(mg_pcg64 *g) {
    if (g->has_half) { g->has_half = 0; return g->half; }
    uint64_t next = mg_pcg64_next64(g);
    g->has_half = 1;
    g->half = (uint32_t)(next >> 32);
    return (uint32_t)next;
}
/* Lemire: m = next32 · (rng + 1); its low word below the threshold (2^32 − rng − 1) mod
   (rng + 1) is rejected and drawn again; the high word is the value.                        */
MGDEF uint32_t mg_pcg64_bounded32(mg_pcg64 *g, uint32_t rng) {
    uint32_t excl = rng + 1u;
    uint64_t m = (uint64_t)mg_pcg64_next32(g) * excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < excl) {
        uint32_t threshold = (0xffffffffu - rng) % excl;
        while (leftover < threshold) {
            m = (uint64_t)mg_pcg64_next32(g) * excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* --split ------------------------------------------------------------------------------------
   Megatron: the numbers found by the regex [.0-9]+ (at most three, missing ones are 0),
   normalised by their sum; cumulative bounds c = [0, w0, w0+w1, w0+w1+w2]; part i exists
   when c[i+1] > c[i] and covers [round(c[i]·S), round(c[i+1]·S)), Python's round (half to
   even, as rint in the default rounding mode).                                              */
MGDEF int mg_split_parse(const char *split, double weights[3], char *err, size_t errlen) {
    int count = 0;
    const char *s = split ? split : "969,30,1";
    weights[0] = weights[1] = weights[2] = 0;
    while (*s) {
        if (!((*s >= '0' && *s <= '9') || *s == '.')) { s++; continue; }
        const char *start = s;
        int dots = 0;
        while ((*s >= '0' && *s <= '9') || *s == '.') dots += *s++ == '.';
        char num[64];
        size_t len = (size_t)(s - start);
        if (dots > 1 || len >= sizeof num || (len == 1 && *start == '.'))
            return mg__fail(err, errlen, "--split '%s': bad number '%.*s' (expected three "
                            "train,valid,test weights like 969,30,1)", split, (int)len, start);
        if (count == 3)
            return mg__fail(err, errlen, "--split '%s': more than three weights (expected "
                            "train,valid,test like 969,30,1)", split);
        memcpy(num, start, len);
        num[len] = 0;
        weights[count++] = strtod(num, NULL);
    }
    double sum = weights[0] + weights[1] + weights[2];
    if (count == 0 || !(sum > 0) || !isfinite(sum))
        return mg__fail(err, errlen, "--split '%s': expected weights like 969,30,1 (train, "
                        "valid and test shares with a positive sum)", split);
    for (int i = 0; i < 3; i++) weights[i] /= sum;
    return 0;
}

static const char *mg__part_name(mg_split_part part) {
    return part == MG_SPLIT_TRAIN ? "train" : part == MG_SPLIT_VALID ? "valid" : "test";
}

/* The cumulative weights c[0..3] of a --split string (after parse). */
static int mg__split_cumulative(const char *split, double c[4], char *err, size_t errlen) {
    double w[3];
    if (mg_split_parse(split, w, err, errlen) != 0) return -1;
    c[0] = 0;
    for (int i = 0; i < 3; i++) c[i + 1] = c[i] + w[i];
    return 0;
}
/* Part `part` of S sequences: [round(c[part]·S), round(c[part+1]·S)), clipped to S. */
static void mg__split_bounds(const double c[4], mg_split_part part, int64_t S, int64_t *begin,
                             int64_t *end) {
    *begin = (int64_t)rint(c[part] * (double)S);
    *end = (int64_t)rint(c[part + 1] * (double)S);
    if (*end > S) *end = S;
}

/* What a dataset's n sequences are called in messages: documents when each is one. */
static const char *mg__units(const mg_dataset *ds, int64_t n) {
    int docs = ds->n_documents == ds->n_sequences;
    return n == 1 ? (docs ? "document" : "sequence") : (docs ? "documents" : "sequences");
}

MGDEF int mg_split_range(const char *split, mg_split_part part, int64_t n_sequences,
                         int64_t *begin, int64_t *end, char *err, size_t errlen) {
    double c[4];
    if ((int)part < 0 || (int)part > 2) return mg__fail(err, errlen, "bad split part %d", (int)part);
    if (mg__split_cumulative(split, c, err, errlen) != 0) return -1;
    if (!(c[part + 1] > c[part]))
        return mg__fail(err, errlen, "--split '%s' gives the %s part no weight", split ? split :
                        "969,30,1", mg__part_name(part));
    mg__split_bounds(c, part, n_sequences, begin, end);
    if (*end <= *begin)
        return mg__fail(err, errlen, "--split '%s': the %s part of %lld sequences is empty",
                        split ? split : "969,30,1", mg__part_name(part), (long long)n_sequences);
    return 0;
}

MGDEF int64_t mg_split_count(const char *split, mg_split_part part, int64_t n_sequences) {
    double c[4];
    int64_t b, e;
    if ((int)part < 0 || (int)part > 2 || mg__split_cumulative(split, c, NULL, 0) != 0) return -1;
    if (!(c[part + 1] > c[part])) return 0;
    mg__split_bounds(c, part, n_sequences, &b, &e);
    return e > b ? e - b : 0;
}

/* With weight w = c[part+1] - c[part] and S·w >= 1 the part is never empty: round() is
   monotone and round(x + 1) >= round(x) + 1, so round(c[part+1]·S) >= round(c[part]·S + 1)
   > round(c[part]·S). Below 1/w some sizes give it a sequence and some none: scan them down
   from just above 1/w to the largest empty one.                                             */
MGDEF int64_t mg_split_min_sequences(const char *split, mg_split_part part) {
    double c[4];
    if ((int)part < 0 || (int)part > 2 || mg__split_cumulative(split, c, NULL, 0) != 0) return -1;
    double w = c[part + 1] - c[part];
    if (!(w > 0)) return -1;
    double top = ceil(1.0 / w) + 2;        /* + 2: rounding of the cumulative sums        */
    if (top > 1e7) return (int64_t)top;    /* a share below 1e-7: the bound itself         */
    for (int64_t S = (int64_t)top; S >= 1; S--) {
        int64_t b, e;
        mg__split_bounds(c, part, S, &b, &e);
        if (e <= b) return S + 1;
    }
    return 1;
}

MGDEF void mg_data_num_samples(int64_t train_iters, int64_t global_batch, int64_t eval_interval,
                               int64_t eval_iters, int64_t out[3]) {
    out[0] = train_iters * global_batch;
    out[1] = (eval_interval > 0 ? train_iters / eval_interval + 1 : 1) * eval_iters * global_batch;
    out[2] = eval_iters * global_batch;
}

MGDEF void mg_sampler_free(mg_sampler *smp) {
    MG_FREE(smp->doc_index);
    MG_FREE(smp->sample_index.v);
    MG_FREE(smp->shuffle_index.v);
    memset(smp, 0, sizeof *smp);
}
MGDEF int64_t mg_sampler_index_bytes(const mg_sampler *smp) {
    if (!smp->doc_index) return 0;
    return 4 * smp->n_doc_index + (int64_t)smp->sample_index.width * 2 * (smp->n_samples + 1) +
           (int64_t)smp->shuffle_index.width * smp->n_samples;
}

/* Megatron's _build_document_index: the part's sequence ids repeated `epochs` times, shuffled
   (one shuffle over all of them).                                                           */
static void mg__build_doc_index(int32_t *out, int64_t seq_begin, int64_t seq_end, int epochs,
                                mg_mt19937 *rng) {
    int64_t n = seq_end - seq_begin, k = 0;
    for (int e = 0; e < epochs; e++)
        for (int64_t i = 0; i < n; i++) out[k++] = (int32_t)(seq_begin + i);
    mg_mt19937_shuffle_i32(rng, out, k);
}

/* Megatron's build_sample_idx (helpers.cpp) with add_extra_token_to_sequence = 1 and
   drop_last_partial_sequence: sample j is (position in doc_index, token offset) of its first
   token; each sample takes s + 1 tokens, the next one starts at its last token. An offset
   is at most the length of its sequence minus 1 (both branches below that set it).         */
static int mg__build_sample_index(mg_sampler *smp, int64_t num_samples, char *err,
                                  size_t errlen) {
    const mg_dataset *ds = smp->ds;
    mg_ix si = smp->sample_index;
    int64_t pos = 0, offset = 0;
    mg__ix_set(si, 0, 0);
    mg__ix_set(si, 1, 0);
    for (int64_t k = 1; k <= num_samples; k++) {
        int64_t remaining = smp->seq_len + 1;
        while (remaining != 0) {
            int64_t doc_len = mg_dataset_seq_len(ds, smp->doc_index[pos]) - offset;
            remaining -= doc_len;
            if (remaining <= 0) {
                offset += remaining + doc_len - 1;
                remaining = 0;
            } else if (pos == smp->n_doc_index - 1) {
                if (k != num_samples)
                    return mg__fail(err, errlen, "%s: internal error: documents ran out at "
                                    "sample %lld of %lld", ds->path, (long long)k,
                                    (long long)num_samples);
                offset = mg_dataset_seq_len(ds, smp->doc_index[pos]) - 1;
                break;
            } else {
                pos++;
                offset = 0;
            }
        }
        mg__ix_set(si, 2 * k, pos);
        mg__ix_set(si, 2 * k + 1, offset);
    }
    return 0;
}

MGDEF int mg_sampler_init(mg_sampler *smp, const mg_dataset *ds, const mg_sampler_desc *desc,
                          char *err, size_t errlen) {
    memset(smp, 0, sizeof *smp);
    if (!ds || !desc)
        return mg__fail(err, errlen, "mg_sampler_init: %s is NULL", ds ? "desc" : "ds");
    smp->ds = ds;
    smp->order = desc->order;
    smp->seq_len = desc->seq_len;
    int64_t s = desc->seq_len, n = desc->n_samples, need_tokens;
    if (desc->order != MG_ORDER_SHUFFLED && desc->order != MG_ORDER_SEQUENTIAL)
        return mg__fail(err, errlen, "unknown data order %d", (int)desc->order);
    if (desc->index_width != 0 && desc->index_width != 8)
        return mg__fail(err, errlen, "index width %d: 0 (4 bytes where the values fit) or 8",
                        desc->index_width);
    if (s < (desc->order == MG_ORDER_SHUFFLED ? 2 : 1))
        return mg__fail(err, errlen, "sequence length (--seq-length) %lld too small: %s",
                        (long long)s, desc->order == MG_ORDER_SHUFFLED ? "the shuffled order "
                        "(Megatron's GPTDataset) needs at least 2; --data-order sequential "
                        "takes 1" : "the sequential order needs at least 1");
    if (n < 1) return mg__fail(err, errlen, "no samples requested (%lld)", (long long)n);
    if (!mg__mul(n, s, &need_tokens) || !mg__add(need_tokens, 1, &need_tokens))
        return mg__fail(err, errlen, "%lld samples of %lld tokens overflow", (long long)n,
                        (long long)s);
    const char *split = desc->split ? desc->split : "969,30,1";
    int64_t need = mg_split_min_sequences(split, desc->part);   /* -1: no weight, bad split */
    if (need > 0 && mg_split_count(split, desc->part, ds->n_sequences) == 0)
        return mg__fail(err, errlen, "%s: --split %s gives the %s part none of its %lld %s (the "
                        "split divides whole %s; a %s part needs %lld or more with this split)",
                        ds->path, split, mg__part_name(desc->part), (long long)ds->n_sequences,
                        mg__units(ds, ds->n_sequences), mg__units(ds, 2),
                        mg__part_name(desc->part), (long long)need);
    if (mg_split_range(desc->split, desc->part, ds->n_sequences, &smp->seq_begin, &smp->seq_end,
                       err, errlen) != 0)
        return -1;
    /* Sequences are contiguous in the token data (checked at open): the part is one run.    */
    int64_t first = mg_dataset_seq_start(ds, smp->seq_begin);
    int64_t last = mg_dataset_seq_start(ds, smp->seq_end - 1) +
                   mg_dataset_seq_len(ds, smp->seq_end - 1);
    smp->part_tokens = last - first;
    int64_t T = smp->part_tokens;
    if (T < 2)
        return mg__fail(err, errlen, "%s: the %s part holds %lld token(s); at least 2 needed",
                        ds->path, mg__part_name(desc->part), (long long)T);
    if (desc->order == MG_ORDER_SEQUENTIAL) {
        smp->n_samples = n;
        return 0;
    }
    if (ds->n_sequences > INT32_MAX)
        return mg__fail(err, errlen, "%s: too many sequences for the shuffled order", ds->path);
    /* Epochs: smallest E with E·T >= n·s + 1 (Megatron's _get_num_epochs).                  */
    int64_t epochs = (need_tokens - 1) / T + 1;
    if (epochs > INT32_MAX / 2)
        return mg__fail(err, errlen, "%s: %lld samples need %lld epochs of the %s part",
                        ds->path, (long long)n, (long long)epochs, mg__part_name(desc->part));
    smp->num_epochs = (int)epochs;
    /* Final epoch kept apart when it would contribute fewer than 80% of an epoch's samples. */
    int64_t sans_final = 0;
    if (epochs > 1) {
        sans_final = ((epochs - 1) * T - 1) / s;
        int64_t from_final = n - sans_final, per_epoch = (T - 1) / s;
        smp->separate_final_epoch = from_final < (int64_t)(0.80 * (double)per_epoch);
    }
    int64_t n_part = smp->seq_end - smp->seq_begin, num_samples, total;
    if (!mg__mul(epochs, n_part, &smp->n_doc_index) || !mg__mul(epochs, T, &total))
        return mg__fail(err, errlen, "%s: index too large", ds->path);
    /* A part of few tokens but many sequences (e.g. mostly empty ones) asked for many
       samples would need a document index of absurd size: refuse it before allocating.    */
    if (smp->n_doc_index > INT32_MAX)
        return mg__fail(err, errlen, "%s: %lld samples of %lld tokens need %lld epochs of the %s "
                        "part's %lld sequences (%lld tokens): a document index of %lld entries "
                        "(limit 2^31 - 1); use more data or fewer samples", ds->path,
                        (long long)n, (long long)s, (long long)epochs, mg__part_name(desc->part),
                        (long long)n_part, (long long)T, (long long)smp->n_doc_index);
    num_samples = (total - 1) / s;
    /* Entry widths, fixed before building from bounds on the values (Megatron's helpers.cpp
       build_sample_idx gives int32 pairs, _build_shuffle_index uint32, where they fit):
       sample index: positions < n_doc_index <= 2^31 - 1 (refused above otherwise); offsets
         <= a sequence's length - 1 <= 2^31 - 2, lengths being int32 (mg_dataset_seq_len: an
         .idx stores them so, an llm.c header counts all its tokens in an int32): always fits;
       shuffle index: values < num_samples, 32-bit while num_samples - 1 <= 2^32 - 1.       */
    int wide = desc->index_width == 8;
    smp->sample_index.width = wide ? 8 : 4;
    smp->shuffle_index.width = wide || num_samples - 1 > (int64_t)UINT32_MAX ? 8 : 4;
    smp->doc_index = (int32_t *)mg__alloc((size_t)smp->n_doc_index * 4);
    smp->sample_index.v = mg__alloc((size_t)(num_samples + 1) * 2 * smp->sample_index.width);
    smp->shuffle_index.v = mg__alloc((size_t)num_samples * smp->shuffle_index.width);
    if (!smp->doc_index || !smp->sample_index.v || !smp->shuffle_index.v) {
        mg_sampler_free(smp);
        return mg__fail(err, errlen, "%s: out of memory for the sample index (%lld samples)",
                        ds->path, (long long)num_samples);
    }
    mg_mt19937 rng;
    mg_mt19937_seed(&rng, desc->seed);
    if (!smp->separate_final_epoch) {
        mg__build_doc_index(smp->doc_index, smp->seq_begin, smp->seq_end, (int)epochs, &rng);
    } else {
        mg__build_doc_index(smp->doc_index, smp->seq_begin, smp->seq_end, (int)epochs - 1, &rng);
        mg__build_doc_index(smp->doc_index + (epochs - 1) * n_part, smp->seq_begin, smp->seq_end,
                            1, &rng);
    }
    if (mg__build_sample_index(smp, num_samples, err, errlen) != 0) {
        mg_sampler_free(smp);
        return -1;
    }
    /* Shuffle index (_build_shuffle_index): [0, m) shuffled, then [m, total) shuffled, with
       m = the samples before the final epoch when it is separate, else all of them.       */
    int64_t m = smp->separate_final_epoch ? sans_final : num_samples;
    for (int64_t i = 0; i < num_samples; i++) mg__ix_set(smp->shuffle_index, i, i);
    mg__ix_shuffle(&rng, smp->shuffle_index, 0, m);
    if (m < num_samples) mg__ix_shuffle(&rng, smp->shuffle_index, m, num_samples - m);
    smp->n_samples = num_samples;
    return 0;
}

/* Copies n tokens of the dataset starting at token index first into out, as int32.         */
static int mg__copy_tokens(const mg_dataset *ds, int64_t first, int64_t n, int32_t *out,
                           char *err, size_t errlen) {
    if (ds->format == MG_DATA_MOCK) {   /* computed, sequence by sequence (ids fit int32) */
        int64_t s = n > 0 ? mg__mock_seq_of(ds, first) : 0, k = 0;
        while (k < n) {
            int64_t start = mg_dataset_seq_start(ds, s), len = mg_dataset_seq_len(ds, s);
            for (int64_t o = first + k - start; o < len && k < n; o++, k++)
                out[k] = (int32_t)mg__mock_token(ds, o, len);
            s++;
        }
        return 0;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t t = mg__load_token(ds->mg__tokens, ds->token_dtype, first + k);
        if (t < INT32_MIN || t > INT32_MAX)
            return mg__fail(err, errlen, "%s: token %lld at position %lld does not fit int32",
                            ds->path, (long long)t, (long long)(first + k));
        out[k] = (int32_t)t;
    }
    return 0;
}

MGDEF int mg_sampler_get(const mg_sampler *smp, int64_t i, int32_t *tokens, char *err,
                         size_t errlen) {
    const mg_dataset *ds = smp->ds;
    int64_t s = smp->seq_len;
    if (!tokens)
        return mg__fail(err, errlen, "%s: mg_sampler_get: tokens is NULL (room for %lld needed)",
                        ds->path, (long long)(s + 1));
    if (i < 0 || i >= smp->n_samples)
        return mg__fail(err, errlen, "%s: sample %lld requested, only %lld available", ds->path,
                        (long long)i, (long long)smp->n_samples);
    if (smp->order == MG_ORDER_SEQUENTIAL) {
        /* Tokens (i·s + k) mod T of the part's stream, k = 0..s, in at most a few runs.    */
        int64_t T = smp->part_tokens, base = mg_dataset_seq_start(ds, smp->seq_begin);
        int64_t pos = i * s % T;  /* i·s < n_samples·s + 1, checked at init: no overflow */
        for (int64_t k = 0; k <= s;) {
            int64_t run = T - pos < s + 1 - k ? T - pos : s + 1 - k;
            if (mg__copy_tokens(ds, base + pos, run, tokens + k, err, errlen) != 0) return -1;
            k += run;
            pos = 0;
        }
        return 0;
    }
    /* Shuffled: sample shuffle[i] spans doc_index[b] from offset bo to doc_index[e] up to and
       including offset eo (GPTDataset._query_document_sample_shuffle_indices).            */
    int64_t j = mg_ix_get(smp->shuffle_index, i);
    int64_t b = mg_ix_get(smp->sample_index, 2 * j), bo = mg_ix_get(smp->sample_index, 2 * j + 1);
    int64_t e = mg_ix_get(smp->sample_index, 2 * j + 2);
    int64_t eo = mg_ix_get(smp->sample_index, 2 * j + 3);
    int64_t k = 0;
    for (int64_t d = b; d <= e; d++) {
        int32_t seq = smp->doc_index[d];
        int64_t from = d == b ? bo : 0;
        int64_t to = d == e ? eo + 1 : mg_dataset_seq_len(ds, seq);  /* exclusive */
        if (to - from > s + 1 - k || from > to)
            return mg__fail(err, errlen, "%s: internal error: sample %lld overruns", ds->path,
                            (long long)i);
        if (mg__copy_tokens(ds, mg_dataset_seq_start(ds, seq) + from, to - from, tokens + k,
                            err, errlen) != 0)
            return -1;
        k += to - from;
    }
    if (k != s + 1)
        return mg__fail(err, errlen, "%s: internal error: sample %lld has %lld tokens", ds->path,
                        (long long)i, (long long)k);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
   2b. Blended data
   ------------------------------------------------------------------------------------------ */
/* A weight: a finite decimal number, nothing after it.                                     */
static int mg__blend_weight(const char *s, double *w) {
    char *end = NULL;
    errno = 0;
    *w = strtod(s, &end);
    return s[0] && end && !*end && !errno && isfinite(*w);
}

MGDEF int mg_blend_parse(const char *flag, const char *const *words, int n_words,
                         const char **prefixes, double *weights, int cap, int *n, int *weighted,
                         char *err, size_t errlen) {
    double sum = 0;
    *n = *weighted = 0;
    if (n_words < 1) return mg__fail(err, errlen, "%s: no dataset given", flag);
    if (n_words == 1) {   /* one prefix, no weight: that dataset alone */
        prefixes[0] = words[0];
        *n = 1;
        return 0;
    }
    {   /* no word a number: several prefixes, blended by their sizes (Megatron-LM's
           get_blend_from_list gives them no weights); a number among them is a typo here */
        int numbers = 0;
        double w;
        for (int i = 0; i < n_words; i++) numbers += mg__blend_weight(words[i], &w);
        if (!numbers) {
            if (n_words > cap)
                return mg__fail(err, errlen, "%s: %d datasets, at most %d", flag, n_words, cap);
            for (int i = 0; i < n_words; i++) prefixes[i] = words[i];
            *n = n_words;
            return 0;
        }
    }
    if (n_words % 2)
        return mg__fail(err, errlen, "%s: %d words; a blend is pairs WEIGHT PREFIX (e.g. 0.7 A "
                        "0.3 B), a single dataset one PREFIX, or prefixes alone (blended by "
                        "their sizes)", flag, n_words);
    if (n_words / 2 > cap)
        return mg__fail(err, errlen, "%s: %d datasets, at most %d", flag, n_words / 2, cap);
    for (int i = 0; i < n_words / 2; i++) {
        double w;
        if (!mg__blend_weight(words[2 * i], &w))
            return mg__fail(err, errlen, "%s: '%s' (word %d) is not a weight; a blend is pairs "
                            "WEIGHT PREFIX (e.g. 0.7 A 0.3 B)", flag, words[2 * i], 2 * i + 1);
        if (!(w > 0))
            return mg__fail(err, errlen, "%s: weight %s of %s must be positive", flag,
                            words[2 * i], words[2 * i + 1]);
        weights[i] = w;
        prefixes[i] = words[2 * i + 1];
        sum += w;
    }
    if (!isfinite(sum)) return mg__fail(err, errlen, "%s: the weights' sum overflows", flag);
    *n = n_words / 2;
    for (int i = 0; i < *n; i++) weights[i] /= sum;
    *weighted = 1;
    return 0;
}

MGDEF int mg_blend_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                           int64_t *dataset_sample_index) {
    int64_t *count = (int64_t *)mg__alloc((size_t)n * sizeof *count);
    if (!count) return -1;
    memset(count, 0, (size_t)n * sizeof *count);
    for (int64_t i = 0; i < size; i++) {
        /* the dataset furthest behind its share w·max(i, 1) (helpers.cpp's double math)    */
        double x = i > 1 ? (double)i : 1.0, best = weights[0] * x - (double)count[0];
        int k = 0;
        for (int j = 1; j < n; j++) {
            double e = weights[j] * x - (double)count[j];
            if (e > best) { best = e; k = j; }
        }
        dataset_index[i] = (int16_t)k;
        dataset_sample_index[i] = count[k]++;
    }
    MG_FREE(count);
    return 0;
}

MGDEF void mg_blend_free(mg_blend *b) {
    if (b->smp)
        for (int k = 0; k < b->n; k++) mg_sampler_free(&b->smp[k]);
    MG_FREE(b->smp);
    MG_FREE(b->weights);
    MG_FREE(b->dataset_index);
    MG_FREE(b->dataset_sample_index);
    memset(b, 0, sizeof *b);
}

MGDEF int mg_blend_init(mg_blend *b, const mg_dataset *const *ds, const double *weights,
                        int n, int weighted, const mg_sampler_desc *desc, char *err,
                        size_t errlen) {
    int64_t N = desc->n_samples;
    memset(b, 0, sizeof *b);
    int by_size = !weighted && n > 1;   /* Megatron's blend of unweighted datasets */
    if (n < 1 || n > MG_BLEND_MAX)
        return mg__fail(err, errlen, "a blend of %d datasets (1 … %d)", n, MG_BLEND_MAX);
    if (N < 1) return mg__fail(err, errlen, "no samples requested (%lld)", (long long)N);
    if (by_size) weighted = 1;          /* weights from the sizes, below, then as given ones */
    b->n = n;
    b->weighted = weighted;
    b->n_samples = N;
    b->smp = (mg_sampler *)mg__alloc((size_t)n * sizeof *b->smp);
    if (b->smp) memset(b->smp, 0, (size_t)n * sizeof *b->smp);
    b->weights = (double *)mg__alloc((size_t)n * sizeof(double));
    if (weighted) {
        b->dataset_index = (int16_t *)mg__alloc((size_t)N * sizeof(int16_t));
        b->dataset_sample_index = (int64_t *)mg__alloc((size_t)N * sizeof(int64_t));
    }
    if (!b->smp || !b->weights || (weighted && (!b->dataset_index || !b->dataset_sample_index))) {
        mg_blend_free(b);
        return mg__fail(err, errlen, "out of memory for a blend of %lld samples", (long long)N);
    }
    for (int k = 0; k < n; k++) {
        mg_sampler_desc d = *desc;
        b->weights[k] = weighted && !by_size ? weights[k] : 1.0;
        /* Megatron's per-dataset request: ceil(ceil(N·w)·(1 + 0.005)); by size: one epoch
           (its num_samples None), as 1 asks for                                          */
        if (by_size) d.n_samples = 1;
        else if (weighted) d.n_samples = (int64_t)ceil(ceil((double)N * weights[k]) * 1.005);
        if (mg_sampler_init(&b->smp[k], ds[k], &d, err, errlen) != 0) {
            mg_blend_free(b);
            return -1;
        }
    }
    if (by_size) {   /* weights = the samples of one epoch of each, normalised; at most all */
        int64_t total = 0;
        for (int k = 0; k < n; k++) total += b->smp[k].n_samples;
        for (int k = 0; k < n; k++) b->weights[k] = (double)b->smp[k].n_samples / (double)total;
        if (total < N) b->n_samples = N = total;
    }
    if (weighted) {
        if (mg_blend_indices(b->weights, n, N, b->dataset_index, b->dataset_sample_index)) {
            mg_blend_free(b);
            return mg__fail(err, errlen, "out of memory for a blend of %d datasets", n);
        }
        for (int64_t i = 0; i < N; i++)   /* the surplus covers the greedy's +1 (checked)   */
            if (b->dataset_sample_index[i] >= b->smp[b->dataset_index[i]].n_samples) {
                int k = b->dataset_index[i];
                mg__fail(err, errlen, "%s: the blend asks for its sample %lld of %lld",
                         ds[k]->path, (long long)b->dataset_sample_index[i],
                         (long long)b->smp[k].n_samples);
                mg_blend_free(b);
                return -1;
            }
    }
    return 0;
}

MGDEF int mg_blend_get(const mg_blend *b, int64_t i, int32_t *tokens, char *err, size_t errlen) {
    if (i < 0 || i >= b->n_samples)
        return mg__fail(err, errlen, "blended sample %lld requested, only %lld available",
                        (long long)i, (long long)b->n_samples);
    if (!b->weighted) return mg_sampler_get(&b->smp[0], i, tokens, err, errlen);
    return mg_sampler_get(&b->smp[b->dataset_index[i]], b->dataset_sample_index[i], tokens, err,
                          errlen);
}

/* ---------------------------------------------------------------------------------------------
   File dtypes
   ------------------------------------------------------------------------------------------ */
static const char *const mg__st_names[MG_ST_NDTYPES] = {
    "F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8",
    "U64", "U32", "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"};
static const unsigned char mg__st_sizes[MG_ST_NDTYPES] = {4, 2, 2, 8, 8, 4, 2, 1,
                                                          8, 4, 2, 1, 1, 1, 1};
MGDEF size_t mg_st_dtype_size(mg_st_dtype dt) {
    return (int)dt >= 0 && dt < MG_ST_NDTYPES ? mg__st_sizes[dt] : 0;
}
MGDEF const char *mg_st_dtype_name(mg_st_dtype dt) {
    return (int)dt >= 0 && dt < MG_ST_NDTYPES ? mg__st_names[dt] : "?";
}

/* ---------------------------------------------------------------------------------------------
   4. llm.c GPT-2 checkpoints
   ------------------------------------------------------------------------------------------ */
MGDEF int mg_llmc_layout(const mg_llmc_config *cfg, mg_llmc_param params[MG_LLMC_NPARAMS],
                         int64_t *n_params, char *err, size_t errlen) {
    int64_t V = cfg->padded_vocab_size, T = cfg->max_seq_len, L = cfg->num_layers,
            C = cfg->channels;
    if (cfg->max_seq_len <= 0 || cfg->vocab_size <= 0 || cfg->num_layers <= 0 ||
        cfg->num_heads <= 0 || cfg->channels <= 0 || cfg->padded_vocab_size < cfg->vocab_size)
        return mg__fail(err, errlen, "invalid GPT-2 config (maxT %d, V %d, L %d, NH %d, C %d, "
                        "Vp %d): all must be positive and Vp >= V", cfg->max_seq_len,
                        cfg->vocab_size, cfg->num_layers, cfg->num_heads, cfg->channels,
                        cfg->padded_vocab_size);
    if (cfg->channels % cfg->num_heads)
        return mg__fail(err, errlen, "invalid GPT-2 config: channels %d not divisible by heads %d",
                        cfg->channels, cfg->num_heads);
    /* name, then the shape; a leading L marks a per-layer stack. Order = file order.       */
    static const char *const names[MG_LLMC_NPARAMS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const int64_t shapes[MG_LLMC_NPARAMS][3] = {
        {V, C, 0}, {T, C, 0}, {L, C, 0}, {L, C, 0}, {L, 3 * C, C}, {L, 3 * C, 0},
        {L, C, C}, {L, C, 0}, {L, C, 0}, {L, C, 0}, {L, 4 * C, C}, {L, 4 * C, 0},
        {L, C, 4 * C}, {L, C, 0}, {C, 0, 0}, {C, 0, 0}};
    int64_t offset = 0;
    for (int p = 0; p < MG_LLMC_NPARAMS; p++) {
        int64_t numel = 1;
        params[p].name = names[p];
        params[p].ndim = 0;
        for (int d = 0; d < 3 && shapes[p][d]; d++) {
            params[p].shape[params[p].ndim++] = shapes[p][d];
            if (!mg__mul(numel, shapes[p][d], &numel))
                return mg__fail(err, errlen, "GPT-2 config too large (%s overflows)", names[p]);
        }
        for (int d = params[p].ndim; d < 3; d++) params[p].shape[d] = 0;
        params[p].numel = numel;
        params[p].offset = offset;
        if (!mg__add(offset, numel, &offset) || offset > ((int64_t)1 << 60))
            return mg__fail(err, errlen, "GPT-2 config too large (%lld+ parameters)",
                            (long long)offset);
    }
    *n_params = offset;
    return 0;
}

MGDEF void mg_llmc_close(mg_llmc_checkpoint *ck) {
    mg__unmap(ck->mg__map, ck->mg__map_len);
    memset(ck, 0, sizeof *ck);
}

MGDEF int mg_llmc_open(const char *path, mg_llmc_checkpoint *ck, char *err, size_t errlen) {
    memset(ck, 0, sizeof *ck);
    void *map; size_t len;
    if (mg__map_header(path, MG_LLMC_HEADER_BYTES, &map, &len, err, errlen) != 0) return -1;
    ck->mg__map = map;
    ck->mg__map_len = len;
    const unsigned char *p = (const unsigned char *)map;
    int rc = 0;
    if (mg__llmc_tokens_kind_of(mg__ldi32(p))) {
        rc = mg__fail(err, errlen, "%s: this is an llm.c %s token file, not a model checkpoint",
                      path, mg__llmc_tokens_kind_of(mg__ldi32(p))->name);
    } else if (mg__ldi32(p) == MG__LLMC_EVAL_MAGIC) {
        rc = mg__fail(err, errlen, "%s: this is %s, not a model checkpoint", path,
                      mg__llmc_other_file(MG__LLMC_EVAL_MAGIC));
    } else if (mg__ldi32(p) != MG__LLMC_CKPT_MAGIC) {
        rc = mg__fail(err, errlen, "%s: bad magic %d (llm.c checkpoints have %d)", path,
                      mg__ldi32(p), MG__LLMC_CKPT_MAGIC);
    } else if (mg__ldi32(p + 4) != 3 && mg__ldi32(p + 4) != 5) {
        rc = mg__fail(err, errlen, "%s: unsupported version %d (3: fp32, 5: bf16)", path,
                      mg__ldi32(p + 4));
    }
    if (rc == 0) {
        ck->version = mg__ldi32(p + 4);
        ck->dtype = ck->version == 3 ? MG_ST_F32 : MG_ST_BF16;
        ck->cfg.max_seq_len = mg__ldi32(p + 8);
        ck->cfg.vocab_size = mg__ldi32(p + 12);
        ck->cfg.num_layers = mg__ldi32(p + 16);
        ck->cfg.num_heads = mg__ldi32(p + 20);
        ck->cfg.channels = mg__ldi32(p + 24);
        ck->cfg.padded_vocab_size = mg__ldi32(p + 28);
        char why[MG_ERRLEN];
        if (mg_llmc_layout(&ck->cfg, ck->params, &ck->n_params, why, sizeof why) != 0) {
            rc = mg__fail(err, errlen, "%s: %s", path, why);
        } else {
            uint64_t need = MG_LLMC_HEADER_BYTES + (uint64_t)ck->n_params *
                            mg_st_dtype_size(ck->dtype);
            if (len != need)
                rc = mg__fail(err, errlen, "%s: %s: %zu bytes, but %lld %s parameters need %llu",
                              path, len < need ? "truncated" : "size mismatch", len,
                              (long long)ck->n_params, mg_st_dtype_name(ck->dtype),
                              (unsigned long long)need);
        }
    }
    if (rc != 0) {
        mg_llmc_close(ck);
        return -1;
    }
    ck->data = p + MG_LLMC_HEADER_BYTES;
    return 0;
}

MGDEF int mg_llmc_writer_begin(mg_pfile *f, const char *path, const char *tag, int create,
                               const mg_llmc_config *cfg, char *err, size_t errlen) {
    mg_llmc_param params[MG_LLMC_NPARAMS];
    int64_t n;
    if (mg_llmc_layout(cfg, params, &n, err, errlen) != 0) return -1;
    int32_t header[256] = {0};
    header[0] = MG__LLMC_CKPT_MAGIC;
    header[1] = 3;
    header[2] = cfg->max_seq_len;
    header[3] = cfg->vocab_size;
    header[4] = cfg->num_layers;
    header[5] = cfg->num_heads;
    header[6] = cfg->channels;
    header[7] = cfg->padded_vocab_size;
    return mg_pfile_begin(f, path, tag, create, MG_LLMC_HEADER_BYTES + 4 * n, header,
                          sizeof header, err, errlen);
}

MGDEF int mg_llmc_write(const char *path, const mg_llmc_config *cfg, const float *params,
                        char *err, size_t errlen) {
    mg_pfile f;
    if (mg_llmc_writer_begin(&f, path, NULL, 1, cfg, err, errlen) != 0) return -1;
    if (mg_pfile_write(&f, MG_LLMC_HEADER_BYTES, params, (size_t)(f.size - MG_LLMC_HEADER_BYTES),
                       err, errlen) != 0) {
        mg_pfile_abort(&f);
        return -1;
    }
    return mg_pfile_commit(&f, err, errlen);
}

/* ---------------------------------------------------------------------------------------------
   7. JSON: recursive descent into a flat token array (depth-limited, so no stack overflow).
   ------------------------------------------------------------------------------------------ */
typedef struct mg__jp {
    const unsigned char *s;
    size_t n, i;
    mg_json_tok *toks;
    int64_t ntok, cap;
    char *err;
    size_t errlen;
} mg__jp;

static int mg__jp_fail(mg__jp *p, const char *what) {
    if (p->i >= p->n)
        return mg__fail(p->err, p->errlen, "malformed JSON: %s at end of input", what);
    unsigned char c = p->s[p->i];
    if (c >= 0x20 && c < 0x7f)
        return mg__fail(p->err, p->errlen, "malformed JSON: %s at byte %zu ('%c')", what, p->i, c);
    return mg__fail(p->err, p->errlen, "malformed JSON: %s at byte %zu (0x%02x)", what, p->i, c);
}
static void mg__jp_ws(mg__jp *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}
static int64_t mg__jp_push(mg__jp *p, mg_json_type type) {
    if (mg__grow((void **)&p->toks, &p->cap, p->ntok + 1, sizeof(mg_json_tok)) != 0) {
        mg__fail(p->err, p->errlen, "JSON: out of memory");
        return -1;
    }
    mg_json_tok *t = &p->toks[p->ntok];
    t->type = type;
    t->start = (int64_t)p->i;
    t->end = t->start;
    t->size = 0;
    t->next = p->ntok + 1;
    return p->ntok++;
}
static int mg__hex4(const unsigned char *s, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}
/* Length of the well-formed UTF-8 sequence at s (of at most n bytes), 0 if malformed.      */
static int mg__utf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1fu) : len == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}
static int mg__jp_string(mg__jp *p) {
    int64_t t = mg__jp_push(p, MG_JSON_STRING);
    if (t < 0) return -1;
    p->i++;  /* opening quote */
    p->toks[t].start = (int64_t)p->i;
    while (p->i < p->n && p->s[p->i] != '"') {
        unsigned char c = p->s[p->i];
        if (c < 0x20) return mg__jp_fail(p, "control character in string");
        if (c == '\\') {
            if (p->i + 1 >= p->n) { p->i = p->n; return mg__jp_fail(p, "unterminated string"); }
            unsigned char e = p->s[p->i + 1];
            if (e == 'u') {
                uint32_t u, lo;
                if (p->i + 6 > p->n || mg__hex4(p->s + p->i + 2, &u) != 0)
                    return mg__jp_fail(p, "bad \\u escape");
                p->i += 6;
                if (u >= 0xdc00 && u <= 0xdfff) return mg__jp_fail(p, "lone low surrogate");
                if (u >= 0xd800 && u <= 0xdbff) {  /* must be followed by a low surrogate */
                    if (p->i + 6 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
                        mg__hex4(p->s + p->i + 2, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
                        return mg__jp_fail(p, "lone high surrogate");
                    p->i += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) { p->i++; return mg__jp_fail(p, "bad escape"); }
            p->i += 2;
            continue;
        }
        int len = mg__utf8_len(p->s + p->i, p->n - p->i);
        if (!len) return mg__jp_fail(p, "invalid UTF-8 in string");
        p->i += (size_t)len;
    }
    if (p->i >= p->n) return mg__jp_fail(p, "unterminated string");
    p->toks[t].end = (int64_t)p->i;
    p->i++;  /* closing quote */
    return 0;
}
static int mg__jp_number(mg__jp *p) {
    int64_t t = mg__jp_push(p, MG_JSON_NUMBER);
    if (t < 0) return -1;
    const unsigned char *s = p->s;
#define MG__DIGIT(k) ((k) < p->n && s[k] >= '0' && s[k] <= '9')
    if (p->i < p->n && s[p->i] == '-') p->i++;
    if (!MG__DIGIT(p->i)) return mg__jp_fail(p, "bad number");
    if (s[p->i] == '0') {
        p->i++;
        if (MG__DIGIT(p->i)) return mg__jp_fail(p, "leading zero in number");
    } else {
        while (MG__DIGIT(p->i)) p->i++;
    }
    if (p->i < p->n && s[p->i] == '.') {
        p->i++;
        if (!MG__DIGIT(p->i)) return mg__jp_fail(p, "bad fraction");
        while (MG__DIGIT(p->i)) p->i++;
    }
    if (p->i < p->n && (s[p->i] == 'e' || s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (s[p->i] == '+' || s[p->i] == '-')) p->i++;
        if (!MG__DIGIT(p->i)) return mg__jp_fail(p, "bad exponent");
        while (MG__DIGIT(p->i)) p->i++;
    }
#undef MG__DIGIT
    p->toks[t].end = (int64_t)p->i;
    return 0;
}
static int mg__jp_value(mg__jp *p, int depth) {
    mg__jp_ws(p);
    if (p->i >= p->n) return mg__jp_fail(p, "expected a value");
    unsigned char c = p->s[p->i];
    if (c == '"') return mg__jp_string(p);
    if (c == '-' || (c >= '0' && c <= '9')) return mg__jp_number(p);
    static const char *const words[3] = {"true", "false", "null"};
    static const mg_json_type wtypes[3] = {MG_JSON_TRUE, MG_JSON_FALSE, MG_JSON_NULL};
    for (int w = 0; w < 3; w++) {
        size_t len = strlen(words[w]);
        if (c == (unsigned char)words[w][0]) {
            if (p->i + len > p->n || memcmp(p->s + p->i, words[w], len) != 0)
                return mg__jp_fail(p, "unexpected character");
            int64_t t = mg__jp_push(p, wtypes[w]);
            if (t < 0) return -1;
            p->i += len;
            p->toks[t].end = (int64_t)p->i;
            return 0;
        }
    }
    if (c != '{' && c != '[') return mg__jp_fail(p, "unexpected character");
    if (depth >= 64) return mg__jp_fail(p, "nesting deeper than 64");
    int is_obj = c == '{';
    unsigned char close = is_obj ? '}' : ']';
    int64_t t = mg__jp_push(p, is_obj ? MG_JSON_OBJECT : MG_JSON_ARRAY);
    if (t < 0) return -1;
    p->i++;
    mg__jp_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
    } else {
        for (;;) {
            if (is_obj) {
                mg__jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != '"') return mg__jp_fail(p, "expected a key");
                if (mg__jp_string(p) != 0) return -1;
                mg__jp_ws(p);
                if (p->i >= p->n || p->s[p->i] != ':') return mg__jp_fail(p, "expected ':'");
                p->i++;
            }
            if (mg__jp_value(p, depth + 1) != 0) return -1;
            p->toks[t].size++;
            mg__jp_ws(p);
            if (p->i < p->n && p->s[p->i] == ',') { p->i++; continue; }
            if (p->i < p->n && p->s[p->i] == close) { p->i++; break; }
            return mg__jp_fail(p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    p->toks[t].end = (int64_t)p->i;
    p->toks[t].next = p->ntok;
    return 0;
}

MGDEF int mg_json_parse(mg_json *js, const char *text, size_t len, char *err, size_t errlen) {
    mg__jp p;
    memset(js, 0, sizeof *js);
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)text;
    p.n = len;
    p.err = err;
    p.errlen = errlen;
    int rc = mg__jp_value(&p, 0);
    if (rc == 0) {
        mg__jp_ws(&p);
        if (p.i != p.n) rc = mg__jp_fail(&p, "trailing characters after the value");
    }
    if (rc != 0) {
        MG_FREE(p.toks);
        return -1;
    }
    js->text = text;
    js->toks = p.toks;
    js->n = p.ntok;
    return 0;
}
MGDEF void mg_json_free(mg_json *js) {
    MG_FREE(js->toks);
    memset(js, 0, sizeof *js);
}

/* Decodes a (validated) string token into out, which holds at least end - start + 1 bytes
   (decoding never grows a string). Returns the length, or -1 if it contains \u0000.       */
static int64_t mg__json_decode(const mg_json *js, int64_t tok, char *out) {
    const unsigned char *s = (const unsigned char *)js->text;
    int64_t i = js->toks[tok].start, end = js->toks[tok].end, n = 0;
    while (i < end) {
        if (s[i] != '\\') { out[n++] = (char)s[i++]; continue; }
        unsigned char e = s[i + 1];
        if (e != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            out[n++] = to[strchr(from, e) - from];
            i += 2;
            continue;
        }
        uint32_t cp, lo;
        mg__hex4(s + i + 2, &cp);
        i += 6;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            mg__hex4(s + i + 2, &lo);
            i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp == 0) return -1;
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xc0 | (cp >> 6));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xe0 | (cp >> 12));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[n++] = (char)(0xf0 | (cp >> 18));
            out[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[n] = 0;
    return n;
}
MGDEF char *mg_json_strdup(const mg_json *js, int64_t tok) {
    if (tok < 0 || tok >= js->n || js->toks[tok].type != MG_JSON_STRING) return NULL;
    char *out = (char *)mg__alloc((size_t)(js->toks[tok].end - js->toks[tok].start + 1));
    if (out && mg__json_decode(js, tok, out) < 0) {
        MG_FREE(out);
        out = NULL;
    }
    return out;
}
MGDEF int64_t mg_json_get(const mg_json *js, int64_t obj, const char *key) {
    if (obj < 0 || obj >= js->n || js->toks[obj].type != MG_JSON_OBJECT) return -1;
    int64_t k = obj + 1, found = -1;
    for (int64_t m = 0; m < js->toks[obj].size; m++) {     /* to the end: the last one wins */
        char *name = mg_json_strdup(js, k);
        if (name && strcmp(name, key) == 0) found = k + 1;
        MG_FREE(name);
        k = js->toks[k + 1].next;  /* skip the value's subtree */
    }
    return found;
}
MGDEF int mg_json_int(const mg_json *js, int64_t tok, int64_t *value) {
    if (tok < 0 || tok >= js->n || js->toks[tok].type != MG_JSON_NUMBER) return -1;
    const char *s = js->text + js->toks[tok].start, *end = js->text + js->toks[tok].end;
    int neg = *s == '-';
    uint64_t v = 0;
    for (s += neg; s < end; s++) {
        if (*s < '0' || *s > '9') return -1;  /* fraction or exponent */
        if (v > (UINT64_C(9223372036854775808) - (uint64_t)(*s - '0')) / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (!neg && v > (uint64_t)INT64_MAX) return -1;
    *value = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* A growable string for building JSON headers.                                              */
typedef struct mg__sb { char *p; int64_t n, cap; int oom; } mg__sb;
static void mg__sb_put(mg__sb *b, const char *s, size_t len) {
    if (b->oom || mg__grow((void **)&b->p, &b->cap, b->n + (int64_t)len + 1, 1) != 0) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->n, s, len);
    b->n += (int64_t)len;
    b->p[b->n] = 0;
}
static void mg__sb_printf(mg__sb *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof tmp) { b->oom = 1; return; }
    mg__sb_put(b, tmp, (size_t)n);
}
/* A JSON string literal: quotes, backslash and control characters escaped.                 */
static void mg__sb_json_str(mg__sb *b, const char *s) {
    mg__sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { char e[2] = {'\\', (char)c}; mg__sb_put(b, e, 2); }
        else if (c < 0x20) mg__sb_printf(b, "\\u%04x", c);
        else mg__sb_put(b, (const char *)&c, 1);
    }
    mg__sb_put(b, "\"", 1);
}
static int mg__utf8_valid(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        int len = mg__utf8_len((const unsigned char *)s + i, n - i);
        if (!len) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------
   5. safetensors
   ------------------------------------------------------------------------------------------ */
#define MG__ST_MAX_HEADER 100000000  /* the reference implementation's limit                 */

MGDEF void mg_st_close(mg_st_file *st) {
    for (int i = 0; i < st->n_tensors; i++) MG_FREE(st->tensors[i].name);
    for (int i = 0; i < st->n_meta; i++) { MG_FREE(st->meta_keys[i]); MG_FREE(st->meta_values[i]); }
    MG_FREE(st->tensors);
    MG_FREE(st->meta_keys);
    MG_FREE(st->meta_values);
    mg__unmap(st->mg__map, st->mg__map_len);
    memset(st, 0, sizeof *st);
}

typedef struct mg__st_span { int64_t begin, end; int tensor; } mg__st_span;
static int mg__st_span_cmp(const void *a, const void *b) {
    const mg__st_span *x = (const mg__st_span *)a, *y = (const mg__st_span *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->tensor - y->tensor;
}

/* Duplicate tensor names (JSON allows them, safetensors does not): the names sorted, then
   neighbours compared, so that a header with millions of entries is checked in n·log n.   */
static int mg__strptr_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}
static int mg__st_check_unique(const mg_st_file *st, const char *path, char *err,
                               size_t errlen) {
    const char **names = (const char **)mg__alloc((size_t)st->n_tensors * sizeof(char *));
    int rc = 0;
    if (!names) return mg__fail(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < st->n_tensors; i++) names[i] = st->tensors[i].name;
    qsort(names, (size_t)st->n_tensors, sizeof *names, mg__strptr_cmp);
    for (int i = 1; i < st->n_tensors && rc == 0; i++)
        if (strcmp(names[i], names[i - 1]) == 0)
            rc = mg__fail(err, errlen, "%s: tensor '%s' appears twice", path, names[i]);
    MG_FREE(names);
    return rc;
}

/* Reads one tensor entry {"dtype", "shape", "data_offsets"} into t and its byte span.       */
static int mg__st_entry(const mg_json *js, int64_t v, mg_st_tensor *t, mg__st_span *span,
                        const char *path, char *err, size_t errlen) {
    int64_t dt = mg_json_get(js, v, "dtype"), sh = mg_json_get(js, v, "shape"),
            off = mg_json_get(js, v, "data_offsets");
    if (js->toks[v].type != MG_JSON_OBJECT || dt < 0 || sh < 0 || off < 0)
        return mg__fail(err, errlen, "%s: tensor '%s': needs dtype, shape and data_offsets", path,
                        t->name);
    char *dname = mg_json_strdup(js, dt);
    int found = -1;
    for (int k = 0; dname && k < MG_ST_NDTYPES; k++)
        if (strcmp(dname, mg__st_names[k]) == 0) found = k;
    if (found < 0) {
        mg__fail(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, t->name,
                 dname ? dname : "(not a string)");
        MG_FREE(dname);
        return -1;
    }
    MG_FREE(dname);
    t->dtype = (mg_st_dtype)found;
    if (js->toks[sh].type != MG_JSON_ARRAY || js->toks[sh].size > MG_ST_MAX_DIMS)
        return mg__fail(err, errlen, "%s: tensor '%s': shape must be an array of at most %d "
                        "integers", path, t->name, MG_ST_MAX_DIMS);
    t->ndim = (int)js->toks[sh].size;
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t dim;
        if (mg_json_int(js, sh + 1 + d, &dim) != 0 || dim < 0)
            return mg__fail(err, errlen, "%s: tensor '%s': shape[%d] is not a non-negative "
                            "integer", path, t->name, d);
        t->shape[d] = dim;
        if (!mg__mul(t->numel, dim, &t->numel))
            return mg__fail(err, errlen, "%s: tensor '%s': shape overflows", path, t->name);
    }
    int64_t nbytes;
    if (!mg__mul(t->numel, (int64_t)mg_st_dtype_size(t->dtype), &nbytes))
        return mg__fail(err, errlen, "%s: tensor '%s': shape overflows", path, t->name);
    t->nbytes = (size_t)nbytes;
    if (js->toks[off].type != MG_JSON_ARRAY || js->toks[off].size != 2 ||
        mg_json_int(js, off + 1, &span->begin) != 0 || mg_json_int(js, off + 2, &span->end) != 0 ||
        span->begin < 0 || span->end < span->begin)
        return mg__fail(err, errlen, "%s: tensor '%s': data_offsets must be [begin, end] with "
                        "0 <= begin <= end", path, t->name);
    if (span->end - span->begin != nbytes)
        return mg__fail(err, errlen, "%s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes, "
                        "but %s with %lld elements needs %lld", path, t->name,
                        (long long)span->begin, (long long)span->end,
                        (long long)(span->end - span->begin), mg_st_dtype_name(t->dtype),
                        (long long)t->numel, (long long)nbytes);
    return 0;
}

/* Parses the header, then checks that the tensors, sorted by offset, tile the data buffer
   exactly: first at 0, each beginning where the previous ended, the last ending at the end
   of the file (the reference implementation's rules).                                     */
static int mg__st_parse(mg_st_file *st, const char *path, mg_json *js, mg__st_span **spans_out,
                        char *err, size_t errlen) {
    const unsigned char *p = (const unsigned char *)st->mg__map;
    size_t len = st->mg__map_len;
    if (len < 8)
        return mg__fail(err, errlen, "%s: truncated (%zu bytes; safetensors starts with an 8-byte "
                        "header length)", path, len);
    uint64_t hn = mg__ld64(p);
    if (hn > len - 8)
        return mg__fail(err, errlen, "%s: truncated header: header length %llu runs past the end "
                        "of the file (%zu bytes)", path, (unsigned long long)hn, len);
    if (hn > MG__ST_MAX_HEADER)
        return mg__fail(err, errlen, "%s: header length %llu over the limit %d", path,
                        (unsigned long long)hn, MG__ST_MAX_HEADER);
    if (hn < 2 || p[8] != '{')
        return mg__fail(err, errlen, "%s: header does not start with '{'", path);
    char why[MG_ERRLEN];
    if (mg_json_parse(js, (const char *)p + 8, (size_t)hn, why, sizeof why) != 0)
        return mg__fail(err, errlen, "%s: header: %s", path, why);
    int64_t n_members = js->toks[0].size;
    st->tensors = (mg_st_tensor *)mg__alloc((size_t)n_members * sizeof(mg_st_tensor));
    mg__st_span *spans = (mg__st_span *)mg__alloc((size_t)n_members * sizeof(mg__st_span));
    *spans_out = spans;
    if (!st->tensors || !spans) return mg__fail(err, errlen, "%s: out of memory", path);
    memset(st->tensors, 0, (size_t)n_members * sizeof(mg_st_tensor));
    int64_t k = 1;
    for (int64_t m = 0; m < n_members; m++, k = js->toks[k + 1].next) {
        char *name = mg_json_strdup(js, k);
        int64_t v = k + 1;
        if (!name) return mg__fail(err, errlen, "%s: header: a key holds \\u0000", path);
        if (strcmp(name, "__metadata__") == 0) {
            MG_FREE(name);
            if (js->toks[v].type != MG_JSON_OBJECT || st->meta_keys)
                return mg__fail(err, errlen, "%s: __metadata__ must be one object", path);
            int64_t nm = js->toks[v].size;
            st->meta_keys = (char **)mg__alloc((size_t)nm * sizeof(char *));
            st->meta_values = (char **)mg__alloc((size_t)nm * sizeof(char *));
            if (!st->meta_keys || !st->meta_values)
                return mg__fail(err, errlen, "%s: out of memory", path);
            for (int64_t q = 0, mk = v + 1; q < nm; q++, mk = js->toks[mk + 1].next) {
                if (js->toks[mk + 1].type != MG_JSON_STRING)
                    return mg__fail(err, errlen, "%s: __metadata__ values must be strings", path);
                st->meta_keys[st->n_meta] = mg_json_strdup(js, mk);
                st->meta_values[st->n_meta] = mg_json_strdup(js, mk + 1);
                st->n_meta++;
                if (!st->meta_keys[q] || !st->meta_values[q])
                    return mg__fail(err, errlen, "%s: __metadata__ holds \\u0000", path);
            }
            continue;
        }
        mg_st_tensor *t = &st->tensors[st->n_tensors];
        t->name = name;
        spans[st->n_tensors].tensor = st->n_tensors;
        st->n_tensors++;
        if (mg__st_entry(js, v, t, &spans[st->n_tensors - 1], path, err, errlen) != 0) return -1;
    }
    if (mg__st_check_unique(st, path, err, errlen) != 0) return -1;
    qsort(spans, (size_t)st->n_tensors, sizeof *spans, mg__st_span_cmp);
    int64_t at = 0, data_len = (int64_t)(len - 8 - hn);
    for (int i = 0; i < st->n_tensors; i++) {
        const char *name = st->tensors[spans[i].tensor].name;
        if (spans[i].begin > at)
            return mg__fail(err, errlen, "%s: gap: tensor '%s' begins at %lld, previous data ends "
                            "at %lld", path, name, (long long)spans[i].begin, (long long)at);
        if (spans[i].begin < at)
            return mg__fail(err, errlen, "%s: overlap: tensor '%s' begins at %lld, inside "
                            "previous data ending at %lld", path, name,
                            (long long)spans[i].begin, (long long)at);
        at = spans[i].end;
    }
    if (at != data_len)
        return mg__fail(err, errlen, "%s: %s: tensors cover %lld bytes of data, the file holds "
                        "%lld", path, at > data_len ? "truncated data" : "trailing bytes",
                        (long long)at, (long long)data_len);
    /* Re-order the tensors by offset and point them into the mapping.                     */
    mg_st_tensor *sorted = (mg_st_tensor *)mg__alloc((size_t)n_members * sizeof(mg_st_tensor));
    if (!sorted) return mg__fail(err, errlen, "%s: out of memory", path);
    for (int i = 0; i < st->n_tensors; i++) {
        sorted[i] = st->tensors[spans[i].tensor];
        sorted[i].data = p + 8 + hn + spans[i].begin;
    }
    MG_FREE(st->tensors);
    st->tensors = sorted;
    return 0;
}

MGDEF int mg_st_open(const char *path, mg_st_file *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    if (mg__map_file(path, &st->mg__map, &st->mg__map_len, err, errlen) != 0) return -1;
    mg_json js;
    mg__st_span *spans = NULL;
    memset(&js, 0, sizeof js);
    int rc = mg__st_parse(st, path, &js, &spans, err, errlen);
    MG_FREE(spans);
    mg_json_free(&js);
    if (rc != 0) mg_st_close(st);
    return rc;
}

MGDEF const mg_st_tensor *mg_st_find(const mg_st_file *st, const char *name) {
    for (int i = 0; i < st->n_tensors; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}
MGDEF const char *mg_st_meta(const mg_st_file *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

static void mg__st_writer_free(mg_st_writer *w) {
    for (int i = 0; w->names && i < w->n_tensors; i++) MG_FREE(w->names[i]);
    MG_FREE(w->names);
    MG_FREE(w->dtypes);
    MG_FREE(w->numel);
    MG_FREE(w->offset);
    w->names = NULL;
    w->dtypes = NULL;
    w->numel = w->offset = NULL;
    w->n_tensors = 0;
}

/* Header: {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
   padded with spaces so the data starts 8-byte aligned (as the reference writer does).    */
MGDEF int mg_st_writer_begin(mg_st_writer *w, const char *path, const char *tag, int create,
                             const mg_st_spec *tensors, int n_tensors,
                             const char *const *meta_keys, const char *const *meta_values,
                             int n_meta, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->file.fd = -1;
    if (n_tensors < 0 || n_meta < 0) return mg__fail(err, errlen, "%s: negative counts", path);
    w->names = (char **)mg__alloc((size_t)n_tensors * sizeof(char *));
    w->dtypes = (mg_st_dtype *)mg__alloc((size_t)n_tensors * sizeof(mg_st_dtype));
    w->numel = (int64_t *)mg__alloc((size_t)n_tensors * 8);
    w->offset = (int64_t *)mg__alloc((size_t)n_tensors * 8);
    if (!w->names || !w->dtypes || !w->numel || !w->offset) {
        mg__st_writer_free(w);
        return mg__fail(err, errlen, "%s: out of memory", path);
    }
    int rc = 0;
    int64_t data = 0, nbytes = 0;
    mg__sb h;
    memset(&h, 0, sizeof h);
    mg__sb_put(&h, "{", 1);
    if (n_meta > 0) {
        mg__sb_put(&h, "\"__metadata__\":{", 16);
        for (int m = 0; m < n_meta && rc == 0; m++) {
            if (!mg__utf8_valid(meta_keys[m]) || !mg__utf8_valid(meta_values[m]))
                rc = mg__fail(err, errlen, "%s: metadata is not valid UTF-8", path);
            if (m) mg__sb_put(&h, ",", 1);
            mg__sb_json_str(&h, meta_keys[m]);
            mg__sb_put(&h, ":", 1);
            mg__sb_json_str(&h, meta_values[m]);
        }
        mg__sb_put(&h, "}", 1);
    }
    /* Pass 1: check every spec, count its elements. Pass 2: assign offsets by size class.  */
    for (int t = 0; t < n_tensors && rc == 0; t++) {
        const mg_st_spec *s = &tensors[t];
        int64_t numel = 1;
        w->names[t] = NULL;
        if (!s->name || !mg__utf8_valid(s->name) || !strcmp(s->name, "__metadata__"))
            rc = mg__fail(err, errlen, "%s: tensor %d has an invalid name", path, t);
        for (int u = 0; u < t && rc == 0; u++)
            if (!strcmp(tensors[u].name, s->name))
                rc = mg__fail(err, errlen, "%s: tensor '%s' listed twice", path, s->name);
        if (rc == 0 && !mg_st_dtype_size(s->dtype))
            rc = mg__fail(err, errlen, "%s: tensor '%s': unknown dtype %d", path, s->name,
                          (int)s->dtype);
        if (rc == 0 && (s->ndim < 0 || s->ndim > MG_ST_MAX_DIMS))
            rc = mg__fail(err, errlen, "%s: tensor '%s': %d dims (0..%d)", path, s->name, s->ndim,
                          MG_ST_MAX_DIMS);
        for (int d = 0; rc == 0 && d < s->ndim; d++)
            if (!mg__mul(numel, s->shape[d], &numel))
                rc = mg__fail(err, errlen, "%s: tensor '%s': bad shape", path, s->name);
        if (rc == 0 && (!mg__mul(numel, (int64_t)mg_st_dtype_size(s->dtype), &nbytes) ||
                        !mg__add(data, nbytes, &data)))
            rc = mg__fail(err, errlen, "%s: tensor '%s': too large", path, s->name);
        if (rc != 0) break;
        w->names[t] = mg__strdup(s->name);
        w->n_tensors = t + 1;
        w->dtypes[t] = s->dtype;
        w->numel[t] = numel;
    }
    data = 0;
    for (size_t size = 8; rc == 0 && size >= 1; size /= 2)
        for (int t = 0; t < n_tensors; t++)
            if (mg_st_dtype_size(w->dtypes[t]) == size) {
                w->offset[t] = data;  /* relative to the data buffer for now */
                data += w->numel[t] * (int64_t)size;
            }
    for (int t = 0; t < n_tensors && rc == 0; t++) {
        const mg_st_spec *s = &tensors[t];
        int64_t end = w->offset[t] + w->numel[t] * (int64_t)mg_st_dtype_size(s->dtype);
        mg__sb_put(&h, h.n > 1 ? "," : "", h.n > 1 ? 1 : 0);
        mg__sb_json_str(&h, s->name);
        mg__sb_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", mg_st_dtype_name(s->dtype));
        for (int d = 0; d < s->ndim; d++) mg__sb_printf(&h, d ? ",%lld" : "%lld", (long long)s->shape[d]);
        mg__sb_printf(&h, "],\"data_offsets\":[%lld,%lld]}", (long long)w->offset[t], (long long)end);
    }
    mg__sb_put(&h, "}", 1);
    while (rc == 0 && !h.oom && (8 + h.n) % 8) mg__sb_put(&h, " ", 1);
    if (rc == 0 && h.oom) rc = mg__fail(err, errlen, "%s: out of memory", path);
    if (rc == 0) {
        uint64_t hn = (uint64_t)h.n;
        unsigned char *header = (unsigned char *)mg__alloc((size_t)h.n + 8);
        if (!header) rc = mg__fail(err, errlen, "%s: out of memory", path);
        else {
            memcpy(header, &hn, 8);
            memcpy(header + 8, h.p, (size_t)h.n);
            for (int t = 0; t < w->n_tensors; t++) w->offset[t] += 8 + h.n;
            rc = mg_pfile_begin(&w->file, path, tag, create, 8 + h.n + data, header,
                                (size_t)h.n + 8, err, errlen);
            MG_FREE(header);
        }
    }
    MG_FREE(h.p);
    if (rc != 0) mg__st_writer_free(w);
    return rc;
}

MGDEF int mg_st_writer_find(const mg_st_writer *w, const char *name) {
    for (int t = 0; t < w->n_tensors; t++)
        if (strcmp(w->names[t], name) == 0) return t;
    return -1;
}
MGDEF int mg_st_writer_write(mg_st_writer *w, int t, int64_t elem_offset, const void *data,
                             int64_t n, char *err, size_t errlen) {
    if (t < 0 || t >= w->n_tensors)
        return mg__fail(err, errlen, "%s: no tensor %d", w->file.path, t);
    if (elem_offset < 0 || n < 0 || elem_offset > w->numel[t] - n)
        return mg__fail(err, errlen, "%s: tensor '%s': elements [%lld, %lld) outside [0, %lld)",
                        w->file.path, w->names[t], (long long)elem_offset,
                        (long long)(elem_offset + n), (long long)w->numel[t]);
    size_t size = mg_st_dtype_size(w->dtypes[t]);
    return mg_pfile_write(&w->file, w->offset[t] + elem_offset * (int64_t)size, data,
                          (size_t)n * size, err, errlen);
}
MGDEF int mg_st_writer_close(mg_st_writer *w, char *err, size_t errlen) {
    int rc = mg_pfile_close(&w->file, err, errlen);
    mg__st_writer_free(w);
    return rc;
}
MGDEF int mg_st_writer_commit(mg_st_writer *w, char *err, size_t errlen) {
    int rc = mg_pfile_commit(&w->file, err, errlen);
    mg__st_writer_free(w);
    return rc;
}
MGDEF void mg_st_writer_abort(mg_st_writer *w) {
    mg_pfile_abort(&w->file);
    mg__st_writer_free(w);
}

/* ---------------------------------------------------------------------------------------------
   6. Hugging Face GPT-2 config.json
   ------------------------------------------------------------------------------------------ */
MGDEF int mg_hf_config_write(const char *path, const mg_hf_config *cfg, char *err, size_t errlen) {
    if (cfg->n_layer <= 0 || cfg->n_head <= 0 || cfg->n_embd <= 0 || cfg->n_positions <= 0 ||
        cfg->vocab_size <= 0)
        return mg__fail(err, errlen, "%s: config values must be positive", path);
    char text[1024];
    int n = snprintf(text, sizeof text,
        "{\n"
        "  \"activation_function\": \"%s\",\n"
        "  \"add_cross_attention\": false,\n"
        "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
        "  \"attn_pdrop\": 0.0,\n"
        "  \"embd_pdrop\": 0.0,\n"
        "  \"initializer_range\": 0.02,\n"
        "  \"layer_norm_epsilon\": 1e-05,\n"
        "  \"model_type\": \"gpt2\",\n"
        "  \"n_ctx\": %d,\n"
        "  \"n_embd\": %d,\n"
        "  \"n_head\": %d,\n"
        "  \"n_inner\": null,\n"
        "  \"n_layer\": %d,\n"
        "  \"n_positions\": %d,\n"
        "  \"reorder_and_upcast_attn\": false,\n"
        "  \"resid_pdrop\": 0.0,\n"
        "  \"scale_attn_by_inverse_layer_idx\": false,\n"
        "  \"scale_attn_weights\": true,\n"
        "  \"tie_word_embeddings\": true,\n"
        "  \"vocab_size\": %d\n"
        "}\n",
        cfg->relu2 ? "relu2" : cfg->gelu_exact ? "gelu" : "gelu_new", cfg->n_positions, cfg->n_embd, cfg->n_head,
        cfg->n_layer, cfg->n_positions, cfg->vocab_size);
    if (n < 0 || n >= (int)sizeof text)
        return mg__fail(err, errlen, "%s: config text does not fit its buffer", path);
    return mg_atomic_write(path, text, (size_t)n, err, errlen);
}

/* A value of the config as it stands in the file (strings with their quotes), for messages. */
static void mg__json_shown(const mg_json *js, int64_t tok, char *out, size_t cap) {
    const mg_json_tok *t = &js->toks[tok];
    int q = t->type == MG_JSON_STRING, len = (int)(t->end - t->start);
    if (t->type == MG_JSON_OBJECT || t->type == MG_JSON_ARRAY) {
        snprintf(out, cap, "%s", t->type == MG_JSON_OBJECT ? "an object" : "an array");
        return;
    }
    snprintf(out, cap, "%s%.*s%s%s", q ? "\"" : "", len > 40 ? 40 : len, js->text + t->start,
             len > 40 ? "..." : "", q ? "\"" : "");
    for (char *c = out; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' ';  /* one line */
}

/* The GPT2Config keys (transformers 4.40.2) that change the function a GPT-2 computes, each
   against what megatron.h computes; an absent key is GPT2Config's default, which is ours.
   The first one that differs is named in err.                                              */
static int mg__hf_config_math(const mg_json *js, const char *path, int64_t n_embd,
                              int *gelu_exact, int *relu2, char *err, size_t errlen) {
    /* GELU's tanh approximation (GPT-2's): these four names all compute it
       (gelu_pytorch_tanh in one fused op, gelu_fast with the constant folded, gelu_accurate
       spelled out); the exact (erf) GELU: "gelu" (F.gelu) and "gelu_python" (spelled out) */
    static const char *const gelus[4] = {"gelu_new", "gelu_pytorch_tanh", "gelu_fast",
                                         "gelu_accurate"};
    /* booleans: the value required (-1: either); why it is ours */
    static const struct { const char *key; int want; const char *why; } flags[5] = {
        {"scale_attn_weights", 1, "attention scores are divided by sqrt(head size)"},
        {"scale_attn_by_inverse_layer_idx", 0, "no extra 1/(layer index + 1) on the scores"},
        {"add_cross_attention", 0, "a decoder-only model: no cross-attention blocks"},
        {"tie_word_embeddings", 1, "the output layer is the word embedding"},
        {"reorder_and_upcast_attn", -1, ""},   /* fp32 scores either way: the same numbers */
    };
    char shown[64];
    int64_t tok = mg_json_get(js, 0, "model_type");
    if (tok >= 0) {
        char *v = mg_json_strdup(js, tok);
        int ok = v && strcmp(v, "gpt2") == 0;
        MG_FREE(v);
        if (!ok) {
            mg__json_shown(js, tok, shown, sizeof shown);
            return mg__fail(err, errlen, "%s: \"model_type\" is %s; megatron.h imports GPT-2 "
                            "(\"gpt2\")", path, shown);
        }
    }
    tok = mg_json_get(js, 0, "activation_function");
    if (tok >= 0) {
        char *v = mg_json_strdup(js, tok);
        int ok = 0;
        for (int k = 0; v && k < 4; k++) ok |= strcmp(v, gelus[k]) == 0;
        *gelu_exact = v && (!strcmp(v, "gelu") || !strcmp(v, "gelu_python"));
        *relu2 = v && !strcmp(v, "relu2");   /* max(x, 0)², Megatron-LM's --squared-relu */
        MG_FREE(v);
        if (!ok && !*gelu_exact && !*relu2) {
            mg__json_shown(js, tok, shown, sizeof shown);
            return mg__fail(err, errlen, "%s: \"activation_function\" is %s; megatron.h computes "
                            "GELU's tanh approximation (\"gelu_new\", also accepted: "
                            "\"gelu_pytorch_tanh\", \"gelu_fast\", \"gelu_accurate\") or the "
                            "exact one (\"gelu\", also accepted: \"gelu_python\"), or the squared ReLU "
                            "(\"relu2\")", path, shown);
        }
    }
    tok = mg_json_get(js, 0, "layer_norm_epsilon");
    if (tok >= 0) {   /* 1e-5 as written by Python, or its float32 rounding */
        double eps = js->toks[tok].type == MG_JSON_NUMBER ? strtod(js->text + js->toks[tok].start,
                                                                   NULL) : -1;
        if (!(fabs(eps - 1e-5) <= 1e-11)) {
            mg__json_shown(js, tok, shown, sizeof shown);
            return mg__fail(err, errlen, "%s: \"layer_norm_epsilon\" is %s; megatron.h's "
                            "layernorms use 1e-05", path, shown);
        }
    }
    for (int k = 0; k < 5; k++) {
        tok = mg_json_get(js, 0, flags[k].key);
        if (tok < 0) continue;
        mg_json_type type = js->toks[tok].type;
        int is_bool = type == MG_JSON_TRUE || type == MG_JSON_FALSE;
        if (is_bool && (flags[k].want < 0 || (type == MG_JSON_TRUE) == flags[k].want)) continue;
        mg__json_shown(js, tok, shown, sizeof shown);
        if (flags[k].want < 0 || !is_bool)
            return mg__fail(err, errlen, "%s: \"%s\" is %s, not true or false", path,
                            flags[k].key, shown);
        return mg__fail(err, errlen, "%s: \"%s\" is %s; megatron.h needs %s (%s)", path,
                        flags[k].key, shown, flags[k].want ? "true" : "false", flags[k].why);
    }
    tok = mg_json_get(js, 0, "n_inner");
    if (tok >= 0 && js->toks[tok].type != MG_JSON_NULL) {
        int64_t inner;
        if (mg_json_int(js, tok, &inner) != 0 || inner != 4 * n_embd) {
            mg__json_shown(js, tok, shown, sizeof shown);
            return mg__fail(err, errlen, "%s: \"n_inner\" is %s; megatron.h's MLP is 4 x n_embd "
                            "= %lld wide (give null or %lld)", path, shown,
                            (long long)(4 * n_embd), (long long)(4 * n_embd));
        }
    }
    return 0;
}

#define MG__CONFIG_MAX_BYTES (16u << 20)  /* GPT-2's config.json has ~1 KB              */
MGDEF int mg_hf_config_read(const char *path, mg_hf_config *cfg, char *err, size_t errlen) {
    char *text;
    size_t len;
    if (mg_read_file(path, MG__CONFIG_MAX_BYTES, &text, &len, err, errlen) != 0) return -1;
    mg_json js;
    char why[MG_ERRLEN];
    int rc = 0;
    if (mg_json_parse(&js, text, len, why, sizeof why) != 0) {
        rc = mg__fail(err, errlen, "%s: %s", path, why);
    } else if (js.toks[0].type != MG_JSON_OBJECT) {
        rc = mg__fail(err, errlen, "%s: not a JSON object (a config.json is {\"n_layer\": ...})",
                      path);
        mg_json_free(&js);
    } else {
        /* the sizes, with GPT2Config's defaults (GPT-2 small) for absent keys */
        static const char *const keys[5] = {"n_layer", "n_head", "n_embd", "n_positions",
                                            "vocab_size"};
        static const int defaults[5] = {12, 12, 768, 1024, 50257};
        int *fields[5] = {&cfg->n_layer, &cfg->n_head, &cfg->n_embd, &cfg->n_positions,
                          &cfg->vocab_size};
        for (int k = 0; k < 5 && rc == 0; k++) {
            int64_t tok = mg_json_get(&js, 0, keys[k]), v = defaults[k];
            if (tok >= 0 && (mg_json_int(&js, tok, &v) != 0 || v <= 0 || v > INT32_MAX)) {
                char shown[64];
                mg__json_shown(&js, tok, shown, sizeof shown);
                rc = mg__fail(err, errlen, "%s: \"%s\" is %s, not a positive integer below 2^31",
                              path, keys[k], shown);
            } else {
                *fields[k] = (int)v;
            }
        }
        cfg->gelu_exact = cfg->relu2 = 0;
        if (rc == 0) rc = mg__hf_config_math(&js, path, cfg->n_embd, &cfg->gelu_exact,
                                             &cfg->relu2, err, errlen);
        mg_json_free(&js);
    }
    MG_FREE(text);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
   8. TensorBoard event files
   ------------------------------------------------------------------------------------------ */
MGDEF uint32_t mg_crc32c(uint32_t crc, const void *data, size_t n) {
    static uint32_t table[256];
    static int ready;
    const unsigned char *p = (const unsigned char *)data;
    size_t i;
    if (!ready) {               /* the byte-wise table of the reflected polynomial 0x82F63B78 */
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b;
            for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
            table[b] = c;
        }
        ready = 1;
    }
    crc = ~crc;
    for (i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* TFRecord's masked CRC: a CRC stored next to the data it covers is rotated and offset so that
   a CRC of a CRC does not look like one.                                                    */
static uint32_t mg__tb_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}
static void mg__put_le(unsigned char *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}
/* Protobuf encoding: a varint is 7 bits per byte, low first, high bit = more follows; a field
   key is (field number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32). */
static size_t mg__tb_varint(unsigned char *p, uint64_t v) {
    size_t n = 0;
    do {
        p[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* One TFRecord holding data[0..n) appended with a single write(). */
static int mg__tb_record(mg_tb_writer *w, const unsigned char *data, size_t n, char *err,
                         size_t errlen) {
    unsigned char buf[12 + 4608 + 4];
    size_t total = 12 + n + 4;
    if (n > 4608) return mg__fail(err, errlen, "%s: event of %zu bytes is too long", w->path, n);
    mg__put_le(buf, n, 8);
    mg__put_le(buf + 8, mg__tb_mask(mg_crc32c(0, buf, 8)), 4);
    memcpy(buf + 12, data, n);
    mg__put_le(buf + 12 + n, mg__tb_mask(mg_crc32c(0, data, n)), 4);
    if (write(w->fd, buf, total) != (ssize_t)total)
        return mg__fail(err, errlen, "%s: write failed (%s)", w->path, strerror(errno));
    return 0;
}

/* Event fields 1 (wall_time, fixed64 double) and 2 (step, varint) into p. */
static size_t mg__tb_event_head(unsigned char *p, int64_t step) {
    struct timespec ts;
    double wall;
    uint64_t bits;
    size_t n = 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    wall = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    memcpy(&bits, &wall, 8);
    p[n++] = 0x09;                                  /* field 1, fixed64 */
    mg__put_le(p + n, bits, 8);
    n += 8;
    p[n++] = 0x10;                                  /* field 2, varint  */
    return n + mg__tb_varint(p + n, (uint64_t)step);
}

MGDEF int mg_tb_open(mg_tb_writer *w, const char *dir, char *err, size_t errlen) {
    static const char version[] = "brain.Event:2";
    unsigned char ev[64];
    char host[256] = "localhost";
    size_t n;
    w->fd = -1;
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return mg__fail(err, errlen, "%s: cannot create the directory (%s)", dir,
                        strerror(errno));
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    if (snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir,
                 (long long)time(NULL), host, (int)getpid()) >= (int)sizeof w->path)
        return mg__fail(err, errlen, "%s: directory name too long", dir);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0666);
    if (w->fd < 0)
        return mg__fail(err, errlen, "%s: cannot create (%s)", w->path, strerror(errno));
    n = mg__tb_event_head(ev, 0);
    ev[n++] = 0x1a;                                 /* field 3, file_version */
    ev[n++] = (unsigned char)(sizeof version - 1);
    memcpy(ev + n, version, sizeof version - 1);
    n += sizeof version - 1;
    if (mg__tb_record(w, ev, n, err, errlen)) {
        mg_tb_close(w);
        return -1;
    }
    return 0;
}

MGDEF int mg_tb_scalar(mg_tb_writer *w, const char *tag, double value, int64_t step,
                       char *err, size_t errlen) {
    unsigned char ev[4608], val[4096], sum[4200];
    size_t tl = strlen(tag), nv = 0, ns = 0, n;
    float f = (float)value;
    uint32_t bits;
    if (tl > 4000) return mg__fail(err, errlen, "tensorboard tag of %zu bytes is too long", tl);
    /* Summary.Value { tag = 1 (string); simple_value = 2 (fixed32 float) } */
    val[nv++] = 0x0a;
    nv += mg__tb_varint(val + nv, tl);
    memcpy(val + nv, tag, tl);
    nv += tl;
    val[nv++] = 0x15;
    memcpy(&bits, &f, 4);
    mg__put_le(val + nv, bits, 4);
    nv += 4;
    /* Summary { value = 1 (message) } */
    sum[ns++] = 0x0a;
    ns += mg__tb_varint(sum + ns, nv);
    memcpy(sum + ns, val, nv);
    ns += nv;
    /* Event { wall_time, step, summary = 5 (message) } */
    n = mg__tb_event_head(ev, step);
    ev[n++] = 0x2a;
    n += mg__tb_varint(ev + n, ns);
    memcpy(ev + n, sum, ns);
    n += ns;
    return mg__tb_record(w, ev, n, err, errlen);
}

MGDEF void mg_tb_close(mg_tb_writer *w) {
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
}

#endif /* MG_DATA_IMPLEMENTED */
#endif /* MG_IMPLEMENTATION */

/*
------------------------------------------------------------------------------
MIT License

Copyright (c) 2026 The megatron.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
------------------------------------------------------------------------------
*/
