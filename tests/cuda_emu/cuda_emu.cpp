/* cuda_emu.cpp — the CUDA emulator's engine (tests/cuda_emu; see README.md). Compiled once,
   WITHOUT the sanitizer flags of the emulated code, into build/obj/cuda_emu.o:

     1. reports (the bug finders' one output path)
     2. device memory: one reserved region, every allocation between redzones, one shadow byte
        per byte (unallocated / freed / allocated-unwritten / written)
     3. shared memory: the executable's TLS segment, its __shared__ variables from the symbol
        table; per-byte shadow for the race detector and unwritten reads
     4. the access hooks (__tsan_readN / __tsan_writeN) that the instrumented code calls;
        4a. the shared-memory bank model they feed (MG_EMU_BANKS=1), and its global-memory
            twin, 32-byte sectors per warp access (MG_EMU_SECTORS=1)
     5. fibers and the block scheduler: barriers, warp operations
     6. launches, atomics
     7. runtime API: devices, memory, streams, events
     8. cuBLAS through cblas_sgemm; 8b. cuBLASLt's matmul with its epilogues
     9. NCCL through MPI                                                                      */
#include <memory>   /* before the CUDA headers: their __noinline__ would break it */
#include "cuda_runtime.h"
#include "cublas_v2.h"
#include "cublasLt.h"
#include "nccl.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"

#include <cblas.h>
#include <map>
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>
#include <string>
#include <algorithm>
#ifdef MG_USE_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

/* =============================================================================================
   1. Reports
   ========================================================================================== */
static std::string g_reports;           /* collected text (mg_emu_collect) */
static int g_report_count, g_launch_reports, g_collect = -1;
#define MG_EMU_MAX_PRINTED 12           /* per launch; the count goes on                      */

/* A switch of the environment (NAME=1), read once into *cached (-1: not read yet) unless the
   program set it first. */
static int env_switch(int *cached, const char *name) {
    if (*cached < 0) {
        const char *e = getenv(name);
        *cached = e && e[0] == '1';
    }
    return *cached;
}
static int collecting(void) { return env_switch(&g_collect, "MG_EMU_CONTINUE"); }
void mg_emu_collect(int on) { g_collect = on != 0; }
const char *mg_emu_reports(void) { return g_reports.c_str(); }
int mg_emu_report_count(void) { return g_report_count; }
void mg_emu_clear_reports(void) { g_reports.clear(); g_report_count = 0; }

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_report_count++;
    if (++g_launch_reports <= MG_EMU_MAX_PRINTED) fprintf(stderr, "mg-emu: %s\n", line);
    if (g_launch_reports == MG_EMU_MAX_PRINTED + 1)
        fprintf(stderr, "mg-emu: (further reports of this launch are counted, not printed)\n");
    g_reports += line;
    g_reports += '\n';
}
/* A bug-finder report from emulated device code (e.g. mma.h's checks). */
void mg_emu_fault(const char *what) { report("%s", what); }
static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mg-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* =============================================================================================
   2. Device memory. cudaMalloc hands out pieces of one reserved region (PROT_NONE until used,
      so a wild address past the last allocation faults), 256-byte aligned, with a 256-byte
      redzone on each side. g_shadow[i] describes byte i of the region.
   ========================================================================================== */
enum { SH_NONE = 0, SH_FREED = 1, SH_UNWRITTEN = 2, SH_WRITTEN = 3 };
#define DEV_RESERVE ((size_t)16 << 30)
#define DEV_ALIGN 256
static char *g_dev;                     /* base of the region */
static unsigned char *g_shadow;
static size_t g_dev_used;
struct Alloc { size_t off, size; int id, freed; };
static std::vector<Alloc> g_allocs;

static void dev_init(void) {
    if (g_dev) return;
    g_dev = (char *)mmap(NULL, DEV_RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0);
    g_shadow = (unsigned char *)mmap(NULL, DEV_RESERVE, PROT_NONE,
                                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (g_dev == MAP_FAILED || g_shadow == MAP_FAILED)
        fatal("cannot reserve %zu bytes of address space for emulated device memory", DEV_RESERVE);
}
static inline int is_dev(const void *p) { return (size_t)((const char *)p - g_dev) < DEV_RESERVE; }

/* The allocation holding device address p, or the nearest one (for messages). */
static const Alloc *alloc_near(const void *p) {
    size_t off = (size_t)((const char *)p - g_dev);
    const Alloc *best = NULL;
    for (const Alloc &a : g_allocs) {
        if (off >= a.off && off < a.off + a.size) return &a;
        size_t d = off < a.off ? a.off - off : off - (a.off + a.size);
        size_t bd = !best ? (size_t)-1 : off < best->off ? best->off - off : off - (best->off + best->size);
        if (d < bd) best = &a;
    }
    return best;
}
static std::string describe_dev(const void *p) {
    char buf[200];
    const Alloc *a = alloc_near(p);
    size_t off = (size_t)((const char *)p - g_dev);
    if (!a) snprintf(buf, sizeof buf, "device address %p (no allocation)", p);
    else if (off >= a->off && off < a->off + a->size)
        snprintf(buf, sizeof buf, "device address %p = byte %zu of cudaMalloc #%d (%zu bytes%s)", p,
                 off - a->off, a->id, a->size, a->freed ? ", freed" : "");
    else if (off < a->off)
        snprintf(buf, sizeof buf, "device address %p, %zu bytes before cudaMalloc #%d (%zu bytes)", p,
                 a->off - off, a->id, a->size);
    else
        snprintf(buf, sizeof buf, "device address %p, %zu bytes after the end of cudaMalloc #%d "
                 "(%zu bytes)", p, off - (a->off + a->size), a->id, a->size);
    return buf;
}

/* Host side: a copy touching device memory must stay inside allocations; it marks what it
   writes. Returns 0 (and reports) when [p, p+n) leaves the allocated bytes.               */
static int dev_range_ok(const char *who, const void *p, size_t n) {
    size_t off = (size_t)((const char *)p - g_dev), i;
    if (!n) return 1;
    if (off >= g_dev_used || n > g_dev_used - off) {
        report("%s: %zu bytes at %s: outside the emulated device memory", who, n,
               describe_dev(p).c_str());
        return 0;
    }
    for (i = 0; i < n; i++)
        if (g_shadow[off + i] < SH_UNWRITTEN) {
            report("%s: %zu bytes from %p: byte %zu is %s", who, n, p, i,
                   describe_dev((const char *)p + i).c_str());
            return 0;
        }
    return 1;
}
static void dev_mark(const void *p, size_t n) {
    if (is_dev(p)) memset(g_shadow + ((const char *)p - g_dev), SH_WRITTEN, n);
}

/* =============================================================================================
   3. Shared memory: every __shared__ variable is a thread_local of the executable, so the
      calling thread's TLS block of the executable is the emulated shared memory. Its symbols
      (offset, size, name) come from the executable's own symbol table.
   ========================================================================================== */
struct SharedVar { size_t off, size; std::string name; int foreign; };
static std::vector<SharedVar> g_svars;  /* sorted by offset */
static char *g_tls;                      /* this thread's TLS block of the executable */
static size_t g_tls_size;
static size_t g_dyn_off = (size_t)-1;    /* offset of the dynamic shared buffer */
static pthread_t g_tls_thread;
static int g_tls_known;
#define DYN_SHARED_MAX (227 * 1024)     /* an H100's opt-in maximum per block */
#define DYN_SHARED_DEFAULT (48 * 1024)  /* without cudaFuncAttributeMaxDynamicSharedMemorySize */
static std::map<std::string, size_t> g_dyn_granted;   /* kernel name -> its opt-in */
static std::string function_name(const void *fn);
/* Launches know their kernel by name (MG_LAUNCH's #kernel), so the opt-in is kept by the name
   of the function at fn, looked up in the executable's symbol table. */
cudaError_t mg_emu_func_set_attribute(const void *fn, enum cudaFuncAttribute attr, int value) {
    std::string name = function_name(fn);
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
        value > DYN_SHARED_MAX || name.empty())
        return cudaErrorInvalidValue;
    g_dyn_granted[name] = (size_t)value;
    return cudaSuccess;
}
alignas(128) static thread_local unsigned char mg_emu_dynamic_shared_buffer[DYN_SHARED_MAX];

static int tls_phdr(struct dl_phdr_info *info, size_t, void *) {
    if (info->dlpi_name && info->dlpi_name[0]) return 0;   /* the executable comes first */
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            g_tls = (char *)info->dlpi_tls_data;
            g_tls_size = info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}
static void read_symbols(void) {
    int fd = open("/proc/self/exe", O_RDONLY);
    off_t len;
    char *img;
    if (fd < 0) return;
    len = lseek(fd, 0, SEEK_END);
    img = (char *)mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (img == MAP_FAILED) return;
    Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
    Elf64_Shdr *sh = (Elf64_Shdr *)(img + eh->e_shoff);
    for (int s = 0; s < eh->e_shnum; s++) {
        if (sh[s].sh_type != SHT_SYMTAB) continue;
        Elf64_Sym *sym = (Elf64_Sym *)(img + sh[s].sh_offset);
        const char *str = img + sh[sh[s].sh_link].sh_offset;
        size_t n = sh[s].sh_size / sizeof *sym;
        for (size_t i = 0; i < n; i++) {
            if (ELF64_ST_TYPE(sym[i].st_info) != STT_TLS || !sym[i].st_size) continue;
            const char *raw = str + sym[i].st_name;
            int st = 0;
            char *dm = abi::__cxa_demangle(raw, NULL, NULL, &st);
            std::string name = st == 0 && dm ? dm : raw;
            free(dm);
            /* "f<float>(…)::warp_vals": keep the variable and its function's name, not the
               parameter list.                                                             */
            size_t colon = name.rfind("::");
            if (colon != std::string::npos) {
                size_t paren = name.find('(');
                if (paren != std::string::npos && paren < colon)
                    name = name.substr(0, paren) + name.substr(colon);
            }
            g_svars.push_back({(size_t)sym[i].st_value, (size_t)sym[i].st_size, name, 0});
        }
    }
    munmap(img, (size_t)len);
    std::sort(g_svars.begin(), g_svars.end(),
              [](const SharedVar &a, const SharedVar &b) { return a.off < b.off; });
}
static int exe_base(struct dl_phdr_info *info, size_t, void *base) {
    if (info->dlpi_name && info->dlpi_name[0]) return 0;   /* the executable comes first */
    *(uintptr_t *)base = (uintptr_t)info->dlpi_addr;
    return 1;
}
/* The unqualified name of the function at fn ("" if not a function of the executable). */
static std::string function_name(const void *fn) {
    uintptr_t base = 0;
    std::string found;
    int fd = open("/proc/self/exe", O_RDONLY);
    off_t len;
    char *img;
    if (fd < 0) return found;
    dl_iterate_phdr(exe_base, &base);
    len = lseek(fd, 0, SEEK_END);
    img = (char *)mmap(NULL, (size_t)len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (img == MAP_FAILED) return found;
    Elf64_Ehdr *eh = (Elf64_Ehdr *)img;
    Elf64_Shdr *sh = (Elf64_Shdr *)(img + eh->e_shoff);
    for (int s = 0; s < eh->e_shnum && found.empty(); s++) {
        if (sh[s].sh_type != SHT_SYMTAB) continue;
        Elf64_Sym *sym = (Elf64_Sym *)(img + sh[s].sh_offset);
        const char *str = img + sh[sh[s].sh_link].sh_offset;
        size_t n = sh[s].sh_size / sizeof *sym;
        for (size_t i = 0; i < n; i++) {
            if (ELF64_ST_TYPE(sym[i].st_info) != STT_FUNC ||
                base + sym[i].st_value != (uintptr_t)fn) continue;
            int st = 0;
            char *dm = abi::__cxa_demangle(str + sym[i].st_name, NULL, NULL, &st);
            found = st == 0 && dm ? dm : str + sym[i].st_name;
            free(dm);
            found = found.substr(0, found.find('('));
            {   /* a template's demangled name starts with its return type: drop it */
                int depth = 0;
                size_t cut = std::string::npos;
                for (size_t c = 0; c < found.size(); c++) {
                    depth += found[c] == '<' ? 1 : found[c] == '>' ? -1 : 0;
                    if (found[c] == ' ' && depth == 0) cut = c;
                }
                if (cut != std::string::npos) found = found.substr(cut + 1);
            }
            break;
        }
    }
    munmap(img, (size_t)len);
    return found;
}
static void shared_init(void) {
    if (g_tls_known && pthread_equal(g_tls_thread, pthread_self())) return;
    if (!g_tls_known) read_symbols();
    g_tls = NULL;
    dl_iterate_phdr(tls_phdr, NULL);
    if (!g_tls) fatal("no TLS block of the executable: build the emulated code with -include "
                      "cuda_runtime.h (which makes __shared__ thread_local)");
    g_tls_thread = pthread_self();
    g_tls_known = 1;
    g_dyn_off = (size_t)(mg_emu_dynamic_shared_buffer - (unsigned char *)g_tls);
}
static std::vector<std::string> g_launched;   /* names of the kernels launched so far */
static const char *g_kernel;
/* At each launch: a variable is foreign when it is a __shared__ variable of a launched kernel
   other than the running one (its symbol reads "kernel::name" or "kernel<…>::name").       */
static void mark_foreign(void) {
    for (SharedVar &v : g_svars) {
        size_t colon = v.name.rfind("::");
        v.foreign = 0;
        if (colon == std::string::npos) continue;
        std::string owner = v.name.substr(0, std::min(colon, v.name.find('<')));
        v.foreign = owner != g_kernel &&
                    std::find(g_launched.begin(), g_launched.end(), owner) != g_launched.end();
    }
}
static const SharedVar *svar_at(size_t off) {
    size_t lo = 0, hi = g_svars.size();
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (g_svars[mid].off + g_svars[mid].size <= off) lo = mid + 1;
        else hi = mid;
    }
    return lo < g_svars.size() && g_svars[lo].off <= off ? &g_svars[lo] : NULL;
}

/* =============================================================================================
   5 (state). Fibers and the block being run
   ========================================================================================== */
enum { F_READY, F_BARRIER, F_WARP, F_DONE };
struct Fiber {
    void *sp;                /* saved stack pointer while switched out */
    char *stack;
    int state;
    uint3 tid;
    /* pending warp operation */
    int op, arg, width;
    unsigned int mask;
    uint64_t value, result;
    int bar_value;           /* __syncthreads_count/and/or predicate */
    /* cp.async: copies issued since the last commit, and the committed groups in flight */
    std::vector<std::pair<char *, const char *>> cp_open;
    std::vector<std::vector<std::pair<char *, const char *>>> cp_groups;
};
static std::vector<Fiber> g_fibers;
static void *g_sched_sp;                 /* the scheduler's saved stack pointer */
static int g_cur = -1;                   /* running fiber (linear thread id), -1 on the host */
static int g_nthreads;
static size_t g_dyn_bytes;
static uint32_t g_epoch;                 /* barrier interval (shared-memory race detector) */
static int g_bar_result;
static unsigned g_shuffle_seed;
static int g_shuffle_known;
#define STACK_BYTES (128 * 1024)

static void where(char *buf, size_t n, int t) {
    const Fiber &f = g_fibers[(size_t)t];
    snprintf(buf, n, "kernel %s block (%u,%u,%u) thread (%u,%u,%u)", g_kernel, blockIdx.x,
             blockIdx.y, blockIdx.z, f.tid.x, f.tid.y, f.tid.z);
}

/* Per-byte shadow of the TLS block for the current launch: epoch of the last access, writer and
   reader (thread ids; -1 none, -2 several readers), written-in-this-block flag.              */
static std::vector<uint32_t> g_s_epoch;
static std::vector<int16_t> g_s_writer, g_s_reader;
static std::vector<uint32_t> g_s_written;   /* epoch-of-block in which the byte was written */
/* __syncwarp orders the accesses of its warp's lanes: g_wsync[w] counts the __syncwarps warp w
   completed in this block; each byte keeps the count its writer saw, the largest count its
   readers saw, and the readers' warp (-1 when they span several).                          */
static std::vector<uint32_t> g_s_wsync_w, g_s_wsync_r;
static std::vector<int8_t> g_s_rwarp;
static uint32_t g_wsync[32];
/* Thread a's access, made when its warp had completed `seen` __syncwarps, happens before the
   running thread t's access: same warp, and a __syncwarp completed in between.              */
static inline int warp_ordered(int a, uint32_t seen, int t) {
    return a >> 5 == t >> 5 && g_wsync[t >> 5] > seen;
}
static uint32_t g_block_serial;

/* =============================================================================================
   4a. The shared-memory bank model (MG_EMU_BANKS=1, or mg_emu_banks(1)). A device serves a
       warp's shared-memory instruction in wavefronts: 32 banks of 4 bytes, one 4-byte word per
       bank per wavefront, the lanes reading one word sharing it. Accesses of 8 and 16 bytes are
       served a half-warp or a quarter-warp (128 bytes) at a time, each part at least one
       wavefront; ldmatrix's four 8 × 16-byte matrices are those quarters. Here the lanes of a
       warp run one after another, so an instruction's warp-wide access is put back together:
       each lane's n-th execution of an access site (the instrumented instruction's address)
       since the last __syncthreads meets the other lanes' n-th, as it would in lockstep. That
       is exact for code the lanes of a warp run alike, and pairs the wrong executions where a
       lane skips some in the middle (a site whose lanes ran it unequal numbers of times is
       marked uneven in the report). Counted per kernel and per site: requests (warp-wide
       accesses), wavefronts, and the ideal (one per part with a lane in it); wavefronts above
       the ideal are bank conflicts, the figure Nsight Compute reports as shared-memory
       wavefronts beyond the ideal. WMMA's fragment loads and stores are not counted: which
       lane reads which element is unspecified on a device.                                  */
struct BankLane { uint64_t off; uint8_t size; };   /* one lane's part of a warp-wide access */
struct BankGroup { uint32_t mask; BankLane lane[32]; };   /* one execution of a site by a warp */
struct BankSite {        /* an access site of one warp in this barrier interval */
    const void *pc;
    int global, size;    /* global memory or shared; its accesses' width in bytes */
    uint32_t runs[32];   /* executions by each lane so far */
    size_t n_groups;     /* groups[0 … n_groups) in use */
    std::vector<BankGroup> groups;
};
struct BankCounts { long requests, wavefronts, ideal; int size, uneven; };
static int g_banks = -1, g_sectors = -1;      /* -1: MG_EMU_BANKS / MG_EMU_SECTORS not read yet */
static int g_bank_paused;                     /* > 0 inside WMMA and the engine's own copies */
static const void *g_pc;                      /* the access site the running hook was called from */
static std::vector<BankSite> g_bank_sites[32];   /* per warp: this interval's sites (the vectors
                                                    and their groups are kept for reuse) */
static size_t g_bank_nsites[32];              /* sites in use per warp */
static std::vector<BankCounts> g_bank_kernel; /* per entry of g_launched */
static std::map<std::pair<size_t, const void *>, BankCounts> g_bank_site;   /* (kernel, site) */
/* the same for global memory (MG_EMU_SECTORS=1): requests, 32-byte sectors, ideal sectors */
static std::vector<BankCounts> g_sector_kernel;
static std::map<std::pair<size_t, const void *>, BankCounts> g_sector_site;
static size_t g_kindex;                       /* the running kernel's entry of g_launched */
static int banks_on(void) { return env_switch(&g_banks, "MG_EMU_BANKS"); }
static int sectors_on(void) { return env_switch(&g_sectors, "MG_EMU_SECTORS"); }
void mg_emu_banks(int on) { g_banks = on != 0; }
void mg_emu_sectors(int on) { g_sectors = on != 0; }
void mg_emu_banks_pause(int pause) { g_bank_paused += pause ? 1 : -1; }
/* The running thread's access of n bytes at off (shared, or global in the device region) from
   site pc: filed under its warp's site, as that lane's next execution of it. */
static void bank_record(const void *pc, uint64_t off, size_t n, int global) {
    int t = g_cur;
    if (g_bank_paused || t < 0 || n > 16 || !pc) return;
    int warp = t >> 5, lane = t & 31;
    std::vector<BankSite> &sites = g_bank_sites[warp];
    size_t &ns = g_bank_nsites[warp], i;
    for (i = 0; i < ns && (sites[i].pc != pc || sites[i].global != global); i++) {}
    if (i == ns) {
        if (ns == sites.size()) sites.emplace_back();
        BankSite &fresh = sites[ns++];
        fresh.pc = pc;
        fresh.global = global;
        fresh.size = 0;
        memset(fresh.runs, 0, sizeof fresh.runs);
        fresh.n_groups = 0;
    }
    BankSite &site = sites[i];
    uint32_t k = site.runs[lane]++;
    site.size = std::max(site.size, (int)n);
    while (site.n_groups <= k) {
        if (site.n_groups == site.groups.size()) site.groups.emplace_back();
        site.groups[site.n_groups++].mask = 0;
    }
    BankGroup &grp = site.groups[k];
    grp.mask |= 1u << lane;
    grp.lane[lane].off = off;
    grp.lane[lane].size = (uint8_t)n;
}
/* Wavefronts of one warp-wide shared access of `size` bytes a lane: per part of 32, 16 or 8
   lanes, the most distinct words any one bank holds. */
static void bank_request(const BankGroup &grp, int size, BankCounts &c) {
    int part_lanes = size <= 4 ? 32 : 128 / size;
    c.requests++;
    for (int part = 0; part * part_lanes < 32; part++) {
        uint32_t words[32][32];   /* [bank][k]: the distinct words asked of each bank */
        int nw[32] = {0}, any = 0, most = 0;
        for (int l = part * part_lanes; l < (part + 1) * part_lanes; l++) {
            if (!(grp.mask >> l & 1)) continue;
            const BankLane &a = grp.lane[l];
            any = 1;
            for (uint64_t w64 = a.off / 4; w64 <= (a.off + a.size - 1) / 4; w64++) {
                uint32_t w = (uint32_t)w64;
                int b = (int)(w % 32), k;
                for (k = 0; k < nw[b] && words[b][k] != w; k++) {}
                if (k == nw[b] && nw[b] < 32) words[b][nw[b]++] = w;
                most = std::max(most, nw[b]);
            }
        }
        c.wavefronts += most;
        c.ideal += any;
    }
}
/* Sectors of one warp-wide global access: the distinct 32-byte sectors its bytes lie in; the
   ideal is its distinct bytes / 32, rounded up (a warp reading 128 contiguous aligned bytes: 4
   of 4; 4 bytes a lane 64 bytes apart: 32 of 4). */
static void sector_request(const BankGroup &grp, BankCounts &c) {
    std::pair<uint64_t, uint64_t> span[32];   /* [begin, end) of each lane's bytes */
    int n = 0;
    for (int l = 0; l < 32; l++)
        if (grp.mask >> l & 1) span[n++] = std::make_pair(grp.lane[l].off, grp.lane[l].off + grp.lane[l].size);
    std::sort(span, span + n);
    uint64_t bytes = 0, sectors = 0, end = 0, last_sector = UINT64_MAX;
    for (int i = 0; i < n; i++) {
        uint64_t b = std::max(span[i].first, end);
        if (span[i].second > b) bytes += span[i].second - b;
        end = std::max(end, span[i].second);
        for (uint64_t sct = span[i].first / 32; sct <= (span[i].second - 1) / 32; sct++)
            if (last_sector == UINT64_MAX || sct > last_sector) { sectors++; last_sector = sct; }
    }
    c.requests++;
    c.wavefronts += (long)sectors;
    c.ideal += (long)((bytes + 31) / 32);
}
/* At a barrier (and at a block's end): every warp's sites counted, one request per execution,
   and emptied (each lane's executions start again from 0). A site whose lanes ran it unequal
   numbers of times is marked uneven. */
static void bank_flush(void) {
    if (g_banks <= 0 && g_sectors <= 0) return;
    if (g_bank_kernel.size() <= g_kindex) g_bank_kernel.resize(g_kindex + 1, BankCounts{0, 0, 0, 0, 0});
    if (g_sector_kernel.size() <= g_kindex) g_sector_kernel.resize(g_kindex + 1, BankCounts{0, 0, 0, 0, 0});
    for (int w = 0; w < 32; w++) {
        for (size_t i = 0; i < g_bank_nsites[w]; i++) {
            const BankSite &site = g_bank_sites[w][i];
            int uneven = 0;
            uint32_t first = 0;
            for (int l = 0; l < 32; l++)
                if (site.runs[l]) {
                    if (!first) first = site.runs[l];
                    else if (site.runs[l] != first) uneven = 1;
                }
            BankCounts sum = {0, 0, 0, 0, 0};
            for (size_t k = 0; k < site.n_groups; k++) {
                if (site.global) sector_request(site.groups[k], sum);
                else bank_request(site.groups[k], site.size, sum);
            }
            BankCounts &kc = (site.global ? g_sector_kernel : g_bank_kernel)[g_kindex];
            BankCounts &sc = (site.global ? g_sector_site : g_bank_site)[std::make_pair(g_kindex, site.pc)];
            kc.requests += sum.requests; kc.wavefronts += sum.wavefronts; kc.ideal += sum.ideal;
            sc.requests += sum.requests; sc.wavefronts += sum.wavefronts; sc.ideal += sum.ideal;
            sc.size = std::max(sc.size, site.size);
            sc.uneven |= uneven;
        }
        g_bank_nsites[w] = 0;
    }
}
static int counts_of(const std::vector<BankCounts> &table, const char *kernel, long *requests,
                     long *units, long *ideal) {
    for (size_t k = 0; k < g_launched.size() && k < table.size(); k++)
        if (g_launched[k].substr(0, g_launched[k].find('<')) == kernel ||
            g_launched[k] == kernel) {
            *requests = table[k].requests;
            *units = table[k].wavefronts;
            *ideal = table[k].ideal;
            return 1;
        }
    return 0;
}
int mg_emu_bank_counts(const char *kernel, long *requests, long *wavefronts, long *ideal) {
    return counts_of(g_bank_kernel, kernel, requests, wavefronts, ideal);
}
int mg_emu_sector_counts(const char *kernel, long *requests, long *sectors, long *ideal) {
    return counts_of(g_sector_kernel, kernel, requests, sectors, ideal);
}

/* =============================================================================================
   4. The access hooks. The emulated code is compiled with -fsanitize=thread (and linked without
      its runtime), which makes every load and store — direct accesses to named thread_local
      variables included — call __tsan_readN/__tsan_writeN(addr): they come here. Only device
      and shared addresses are looked at.
   ========================================================================================== */
static void shared_access(size_t off, size_t n, int write) {
    char w[200] = "";
    int t = g_cur;
    if (g_pc && banks_on()) bank_record(g_pc, off, n, 0);
    const SharedVar *v = svar_at(off);
    size_t limit = 0;
    if (v) limit = v->off == g_dyn_off ? v->off + g_dyn_bytes : v->off + v->size;
    /* The __shared__ variables of all kernels lie side by side: an index past the end of one
       lands in the next. A variable of another kernel that has been launched is never this
       kernel's, so touching it is out of bounds; the message names the variable before it. */
    if (v && v->off != g_dyn_off && v->foreign) {
        where(w, sizeof w, t);
        const SharedVar *prev = NULL;
        for (const SharedVar &s : g_svars)
            if (s.off + s.size <= off && !s.foreign && s.off != g_dyn_off) prev = &s;
        if (prev)
            report("out-of-bounds shared memory %s in %s: %zu bytes at %p = '%s' + %zu (%zu bytes), "
                   "inside '%s' of another kernel", write ? "write" : "read", w, n,
                   (void *)(g_tls + off), prev->name.c_str(), off - prev->off, prev->size,
                   v->name.c_str());
        else
            report("out-of-bounds shared memory %s in %s: %zu bytes at %p, inside '%s' of another "
                   "kernel", write ? "write" : "read", w, n, (void *)(g_tls + off), v->name.c_str());
        return;
    }
    if (!v || off + n > limit) {
        const SharedVar *prev = NULL;
        where(w, sizeof w, t);
        for (const SharedVar &s : g_svars) if (s.off <= off) prev = &s;
        if (prev && prev->off == g_dyn_off)
            report("out-of-bounds shared memory %s in %s: %zu bytes at byte %zu of the dynamic "
                   "shared memory (%zu bytes given at launch)", write ? "write" : "read", w, n,
                   off - prev->off, g_dyn_bytes);
        else if (prev)
            report("out-of-bounds shared memory %s in %s: %zu bytes at %p = '%s' + %zu (%zu bytes)",
                   write ? "write" : "read", w, n, (void *)(g_tls + off), prev->name.c_str(),
                   off - prev->off, prev->size);
        else
            report("out-of-bounds shared memory %s in %s: %zu bytes at %p (before every __shared__ "
                   "variable)", write ? "write" : "read", w, n, (void *)(g_tls + off));
        return;
    }
    uint32_t now = g_wsync[t >> 5];
    for (size_t b = off; b < off + n; b++) {
        if (g_s_epoch[b] != g_epoch) {
            g_s_epoch[b] = g_epoch; g_s_writer[b] = -1; g_s_reader[b] = -1; g_s_rwarp[b] = -1;
            g_s_wsync_r[b] = 0;
        }
        int wr = g_s_writer[b], rd = g_s_reader[b];
        int other = -1;
        const char *what = NULL;
        int wr_races = wr >= 0 && wr != t && !warp_ordered(wr, g_s_wsync_w[b], t);
        if (write) {
            if (wr_races) { other = wr; what = "wrote"; }
            else if ((rd == -2 && !(g_s_rwarp[b] == t >> 5 && g_wsync[t >> 5] > g_s_wsync_r[b])) ||
                     (rd >= 0 && rd != t && !warp_ordered(rd, g_s_wsync_r[b], t))) {
                other = rd; what = "read";
            }
            g_s_writer[b] = (int16_t)t;
            g_s_wsync_w[b] = now;
        } else {
            if (g_s_written[b] != g_block_serial) {
                where(w, sizeof w, t);
                report("uninitialised shared memory read in %s: %zu bytes at %p = '%s' + %zu, not "
                       "written by any thread of this block", w, n, (void *)(g_tls + off),
                       v->name.c_str(), off - v->off);
                for (size_t c = off; c < off + n; c++)   /* a later write still races with it */
                    if (g_s_epoch[c] == g_epoch)
                        g_s_reader[c] = g_s_reader[c] == -1 || g_s_reader[c] == t ? (int16_t)t : (int16_t)-2;
                return;
            }
            if (wr_races) { other = wr; what = "wrote"; }
            g_s_reader[b] = rd == -1 || rd == t ? (int16_t)t : (int16_t)-2;
            g_s_rwarp[b] = rd == -1 || g_s_rwarp[b] == t >> 5 ? (int8_t)(t >> 5) : (int8_t)-1;
            g_s_wsync_r[b] = std::max(g_s_wsync_r[b], now);
        }
        if (write) g_s_written[b] = g_block_serial;
        if (what) {
            char o[64];
            where(w, sizeof w, t);
            if (other >= 0) {
                const Fiber &f = g_fibers[(size_t)other];
                snprintf(o, sizeof o, "thread (%u,%u,%u)", f.tid.x, f.tid.y, f.tid.z);
            } else snprintf(o, sizeof o, "other threads");
            report("shared memory race in %s: %s of %zu bytes at %p = '%s' + %zu; %s %s it since "
                   "the last __syncthreads (or __syncwarp of their warp), no atomic", w, write ? "write" : "read", n,
                   (void *)(g_tls + off), v->name.c_str(), off - v->off, o, what);
            return;
        }
    }
}
static void device_access(const void *p, size_t n, int write) {
    size_t off = (size_t)((const char *)p - g_dev);
    char w[200];
    if (g_cur < 0) {
        report("host code %s %zu bytes of %s: device memory is not host-accessible (copy it with "
               "cudaMemcpy)", write ? "writes" : "reads", n, describe_dev(p).c_str());
        if (!collecting()) fatal("stopping after a host access to device memory");
        return;
    }
    if (g_pc && sectors_on()) bank_record(g_pc, off, n, 1);
    for (size_t i = 0; i < n; i++) {
        int s = off + i < g_dev_used ? (int)g_shadow[off + i] : (int)SH_NONE;
        if (s >= SH_UNWRITTEN) {
            if (write) g_shadow[off + i] = SH_WRITTEN;
            else if (s == SH_UNWRITTEN) {
                where(w, sizeof w, g_cur);
                report("uninitialised device memory read in %s: %zu bytes at %s, never written "
                       "since cudaMalloc", w, n, describe_dev((const char *)p + i).c_str());
                memset(g_shadow + off + i, SH_WRITTEN, 1);   /* once per byte */
                return;
            }
            continue;
        }
        where(w, sizeof w, g_cur);
        report("%s device memory %s in %s: %zu bytes at %s", s == SH_FREED ? "use-after-free" :
               "out-of-bounds", write ? "write" : "read", w, n, describe_dev(p).c_str());
        return;
    }
}
static size_t g_sh_lo, g_sh_span;       /* shared window, set only while a kernel runs */
static inline void check(uintptr_t a, size_t n, int write) {
    if (a - (uintptr_t)g_dev < DEV_RESERVE) device_access((const void *)a, n, write);
    else if (a - g_sh_lo < g_sh_span) shared_access(a - g_sh_lo, n, write);
}
extern "C" {
/* g_pc: the instrumented instruction's site, for the bank model; NULL in the engine's own
   checks (an ldmatrix's element reads, the copies a cp.async.wait_group lands). */
#define MG_EMU_SITE_CHECK(a, n, write) \
    { g_pc = __builtin_return_address(0); check((uintptr_t)(a), n, write); g_pc = NULL; }
#define MG_EMU_HOOK(n) \
    void __tsan_read##n(void *a) MG_EMU_SITE_CHECK(a, n, 0) \
    void __tsan_write##n(void *a) MG_EMU_SITE_CHECK(a, n, 1) \
    void __tsan_unaligned_read##n(void *a) MG_EMU_SITE_CHECK(a, n, 0) \
    void __tsan_unaligned_write##n(void *a) MG_EMU_SITE_CHECK(a, n, 1)
MG_EMU_HOOK(1)
MG_EMU_HOOK(2)
MG_EMU_HOOK(4)
MG_EMU_HOOK(8)
MG_EMU_HOOK(16)
#undef MG_EMU_HOOK
void __tsan_read_range(void *a, unsigned long n) MG_EMU_SITE_CHECK(a, n, 0)
void __tsan_write_range(void *a, unsigned long n) MG_EMU_SITE_CHECK(a, n, 1)
#undef MG_EMU_SITE_CHECK
/* Atomics of host code (C11/__atomic, e.g. mg_comm.h's watchdog): done, not checked. */
#define MG_EMU_TSAN_ATOMIC(bits, T) \
    T __tsan_atomic##bits##_load(const volatile T *a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); } \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int) { __atomic_store_n(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_exchange(volatile T *a, T v, int) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_add(volatile T *a, T v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_fetch_sub(volatile T *a, T v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int, int) { \
        return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); } \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int, int) { \
        __atomic_compare_exchange_n(a, &c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); return c; }
MG_EMU_TSAN_ATOMIC(8, uint8_t)
MG_EMU_TSAN_ATOMIC(16, uint16_t)
MG_EMU_TSAN_ATOMIC(32, uint32_t)
MG_EMU_TSAN_ATOMIC(64, uint64_t)
#undef MG_EMU_TSAN_ATOMIC
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) {}
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
}

/* =============================================================================================
   5. Fibers: a stack per thread of the block and a minimal x86-64 context switch (callee-saved
      registers on the stack, stack pointers swapped); threads switch only inside the
      emulator, at barriers and warp operations, back to the scheduler. The floating-point
      control words (MXCSR, x87) are the host thread's for every fiber and are not switched:
      saving them made up most of a switch's cost.
   ========================================================================================== */
extern "C" void mg_emu_swap(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl mg_emu_swap\n"
        ".type mg_emu_swap,@function\n"
        "mg_emu_swap:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size mg_emu_swap, .-mg_emu_swap\n");

static mg_emu_body_fn g_body;
static void *g_closure;

static void set_coords(int t) {
    g_cur = t;
    threadIdx = g_fibers[(size_t)t].tid;
}
static void fiber_main(void) {
    g_body(g_closure);
    g_fibers[(size_t)g_cur].state = F_DONE;
    mg_emu_swap(&g_fibers[(size_t)g_cur].sp, g_sched_sp);
    abort(); /* a finished fiber is never resumed */
}
/* A fresh context whose first switch-in "returns" into fiber_main with an aligned stack. */
static void fiber_start(Fiber &f, int t) {
    /* Stack tops staggered by 3 cache lines: equally spaced stacks would all map to the same
       cache sets and evict each other at every switch.                                     */
    uint64_t *top = (uint64_t *)(f.stack + STACK_BYTES - (size_t)(t * 192 % 4096));
    *--top = 0;                         /* fiber_main's (never used) return address */
    *--top = (uint64_t)(uintptr_t)&fiber_main;
    for (int i = 0; i < 6; i++) *--top = 0;
    f.sp = top;
}
static void yield_to_scheduler(void) { mg_emu_swap(&g_fibers[(size_t)g_cur].sp, g_sched_sp); }

static void need_fiber(const char *what) {
    if (g_cur < 0) fatal("%s called outside a kernel", what);
}
static void barrier(int predicate) {
    need_fiber("__syncthreads");
    g_fibers[(size_t)g_cur].state = F_BARRIER;
    g_fibers[(size_t)g_cur].bar_value = predicate != 0;
    yield_to_scheduler();
}
void __syncthreads(void) { barrier(0); }
int __syncthreads_count(int p) { barrier(p); return g_bar_result; }
int __syncthreads_and(int p) { barrier(p); return g_bar_result == g_nthreads; }
int __syncthreads_or(int p) { barrier(p); return g_bar_result != 0; }

uint64_t mg_emu_warp_op(int op, unsigned int mask, uint64_t value, int arg, int width) {
    need_fiber("a warp operation");
    Fiber &f = g_fibers[(size_t)g_cur];
    f.state = F_WARP;
    f.op = op; f.mask = mask; f.value = value; f.arg = arg; f.width = width;
    yield_to_scheduler();
    return g_fibers[(size_t)g_cur].result;
}
void __syncwarp(unsigned int mask) { mg_emu_warp_op(MG_EMU_SYNCWARP, mask, 0, 0, 32); }
/* cp.async (16 bytes, global to shared): recorded when issued, grouped by commit, and made —
   the source read and the shared bytes written, both through the access hooks, by the issuing
   thread — only when a wait_group completes its group. A read of the destination before that
   sees what was there before, as a device may show it; the race detector sees the write at
   the wait, after which only a barrier makes it visible to other threads. */
/* p is 16-byte aligned shared memory (cp.async's destination, an ldmatrix row) */
static int shared16(const void *p) {
    return (uintptr_t)p % 16 == 0 && (uintptr_t)p - g_sh_lo < g_sh_span;
}
void mg_emu_cp_async16(void *dst, const void *src) {
    need_fiber("cp.async");
    Fiber &f = g_fibers[(size_t)g_cur];
    if (!shared16(dst) || (uintptr_t)src % 16) {
        char wh[200];
        where(wh, sizeof wh, g_cur);
        report("cp.async in %s: destination %p must be 16-byte aligned shared memory and source "
               "%p 16-byte aligned", wh, dst, src);
        return;
    }
    if (banks_on()) bank_record(__builtin_return_address(0), (uintptr_t)dst - g_sh_lo, 16, 0);
    if (sectors_on() && is_dev(src))   /* the global read, counted at the issue */
        bank_record(__builtin_return_address(0), (uint64_t)((const char *)src - g_dev), 16, 1);
    f.cp_open.push_back(std::make_pair((char *)dst, (const char *)src));
}
void mg_emu_cp_async_commit(void) {
    need_fiber("cp.async.commit_group");
    Fiber &f = g_fibers[(size_t)g_cur];
    f.cp_groups.push_back(f.cp_open);
    f.cp_open.clear();
}
void mg_emu_cp_async_wait(int n) {
    need_fiber("cp.async.wait_group");
    Fiber &f = g_fibers[(size_t)g_cur];
    while ((int)f.cp_groups.size() > n) {
        for (const std::pair<char *, const char *> &c : f.cp_groups.front()) {
            check((uintptr_t)c.second, 16, 0);
            check((uintptr_t)c.first, 16, 1);
            memcpy(c.first, c.second, 16);
        }
        f.cp_groups.erase(f.cp_groups.begin());
    }
}
/* ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8×8 matrices of 16-bit elements,
   row i of matrix q at the 16-byte aligned shared address lane 8q + i gives; each lane gets
   one 32-bit register per matrix: without .trans the elements (row lane/4, columns 2·(lane%4)
   and the next), with .trans (rows 2·(lane%4) and the next, column lane/4) — the lower column
   (or row) in the low half. Warp-collective: every lane leaves its address in its warp's row
   of a table between two __syncwarps, then reads its own elements, through the access hooks,
   from the rows the others named. */
static const char *g_ldm_rows[32][32];   /* [warp][lane] */
void mg_emu_ldmatrix_x4(uint32_t r[4], const void *p, int trans) {
    need_fiber("ldmatrix");
    int warp = g_cur >> 5, lane = g_cur & 31, q;
    __syncwarp(0xFFFFFFFFu);
    if (!shared16(p)) {
        char wh[200];
        where(wh, sizeof wh, g_cur);
        report("ldmatrix in %s: the row address %p must be 16-byte aligned shared memory", wh, p);
        p = NULL;
    } else if (banks_on())   /* a lane's row: its matrix's 8 rows are one quarter-warp part */
        bank_record(__builtin_return_address(0), (uintptr_t)p - g_sh_lo, 16, 0);
    g_ldm_rows[warp][lane] = (const char *)p;
    __syncwarp(0xFFFFFFFFu);
    for (q = 0; q < 4; q++) {
        uint16_t e[2] = {0, 0};
        int h;
        for (h = 0; h < 2; h++) {
            int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;
            const char *src = g_ldm_rows[warp][8 * q + row];
            if (!src) continue;
            check((uintptr_t)(src + 2 * col), 2, 0);
            memcpy(&e[h], src + 2 * col, 2);
        }
        r[q] = (uint32_t)e[0] | (uint32_t)e[1] << 16;
    }
    __syncwarp(0xFFFFFFFFu);
}
unsigned int __activemask(void) {
    need_fiber("__activemask");
    unsigned int m = 0;
    int w0 = g_cur & ~31;
    for (int l = 0; l < 32 && w0 + l < g_nthreads; l++)
        if (g_fibers[(size_t)(w0 + l)].state != F_DONE) m |= 1u << l;
    return m;
}

static const char *op_name(int op) {
    static const char *names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync",
                                  "__shfl_xor_sync", "__ballot_sync", "__any_sync",
                                  "__all_sync", "__syncwarp"};
    return names[op];
}

/* Completes the warp operations of warp w whose every named lane has arrived. Returns the
   number of lanes released; reports (and returns -1 for) a lane set that can never complete. */
static int resolve_warp(int w) {
    int base = w * 32, lanes = std::min(32, g_nthreads - base), released = 0;
    char wh[200];
    for (int l = 0; l < lanes; l++) {
        Fiber &f = g_fibers[(size_t)(base + l)];
        if (f.state != F_WARP) continue;
        unsigned int mask = f.mask;
        int ready = 1;
        if (!(mask >> l & 1)) {
            where(wh, sizeof wh, base + l);
            report("%s in %s: the mask 0x%08x does not name the calling lane %d", op_name(f.op),
                   wh, mask, l);
            return -1;
        }
        if (f.op <= MG_EMU_SHFL_XOR && (f.width < 1 || f.width > 32 || (f.width & (f.width - 1)))) {
            where(wh, sizeof wh, base + l);
            report("%s in %s: width %d is not a power of two from 1 to 32", op_name(f.op), wh,
                   f.width);
            return -1;
        }
        for (int m = 0; m < 32 && ready; m++) {
            if (!(mask >> m & 1)) continue;
            if (m >= lanes) {
                where(wh, sizeof wh, base + l);
                report("%s in %s: the mask 0x%08x names lane %d, which does not exist (the block "
                       "has %d threads)", op_name(f.op), wh, mask, m, g_nthreads);
                return -1;
            }
            const Fiber &g = g_fibers[(size_t)(base + m)];
            if (g.state == F_DONE) {
                where(wh, sizeof wh, base + l);
                report("%s in %s: the mask 0x%08x names lane %d, which has exited", op_name(f.op),
                       wh, mask, m);
                return -1;
            }
            if (g.state != F_WARP) ready = 0;
            else if (g.mask != mask || g.op != f.op) {
                where(wh, sizeof wh, base + l);
                report("%s in %s: lane %d is at %s with mask 0x%08x (mask 0x%08x here): the lanes "
                       "of a mask must meet at the same warp operation", op_name(f.op), wh, m,
                       op_name(g.op), g.mask, mask);
                return -1;
            }
        }
        if (!ready) continue;
        /* every lane of the mask is here: compute each one's result */
        uint64_t ballot = 0;
        for (int m = 0; m < 32; m++)
            if (mask >> m & 1 && g_fibers[(size_t)(base + m)].value) ballot |= 1ull << m;
        for (int m = 0; m < 32; m++) {
            if (!(mask >> m & 1)) continue;
            Fiber &g = g_fibers[(size_t)(base + m)];
            int width = g.width, seg = m & ~(width - 1), src = m;
            switch (g.op) {
            case MG_EMU_SHFL: src = seg + (g.arg & (width - 1)); break;
            case MG_EMU_SHFL_UP: src = (m - seg) >= g.arg ? m - g.arg : m; break;
            case MG_EMU_SHFL_DOWN: src = (m - seg) + g.arg < width ? m + g.arg : m; break;
            case MG_EMU_SHFL_XOR: src = m ^ g.arg; if (src >= seg + width) src = m; break;
            default: break;
            }
            if (g.op <= MG_EMU_SHFL_XOR) {
                if (src < 0 || src > 31 || !(mask >> src & 1)) {
                    where(wh, sizeof wh, base + m);
                    report("%s in %s: reads lane %d, which is not in the mask 0x%08x (undefined "
                           "value)", op_name(g.op), wh, src, mask);
                    g.result = g.value;
                } else g.result = g_fibers[(size_t)(base + src)].value;
            } else if (g.op == MG_EMU_BALLOT) g.result = ballot;
            else if (g.op == MG_EMU_ANY) g.result = ballot != 0;
            else if (g.op == MG_EMU_ALL) g.result = ballot == (uint64_t)mask;
            else g.result = 0;
            g.state = F_READY;
            released++;
        }
        if (f.op == MG_EMU_SYNCWARP) g_wsync[w]++;
    }
    return released;
}

static uint64_t g_rng;
static uint32_t rng_next(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
void mg_emu_set_shuffle(unsigned seed) { g_shuffle_seed = seed; g_shuffle_known = 1; }

/* Runs one block to completion: every ready fiber runs until it blocks or ends (in order, or
   shuffled), then warp operations complete, then a barrier that every live thread reached
   opens. Anything else is a deadlock (a barrier not reached by all, a warp operation waiting
   for a lane at a barrier).                                                                */
static void run_block(void) {
    std::vector<int> order((size_t)g_nthreads);
    for (int t = 0; t < g_nthreads; t++) {
        order[(size_t)t] = t;
        g_fibers[(size_t)t].state = F_READY;
        g_fibers[(size_t)t].cp_open.clear();
        g_fibers[(size_t)t].cp_groups.clear();
        fiber_start(g_fibers[(size_t)t], t);
    }
    g_epoch++;
    g_block_serial++;
    memset(g_wsync, 0, sizeof g_wsync);
    memset(g_bank_nsites, 0, sizeof g_bank_nsites);   /* left by a block abandoned at a report */
    for (;;) {
        if (g_shuffle_seed)
            for (int i = g_nthreads - 1; i > 0; i--)
                std::swap(order[(size_t)i], order[rng_next() % (uint32_t)(i + 1)]);
        for (int i = 0; i < g_nthreads; i++) {
            int t = order[(size_t)i];
            if (g_fibers[(size_t)t].state != F_READY) continue;
            set_coords(t);
            mg_emu_swap(&g_sched_sp, g_fibers[(size_t)t].sp);
            g_cur = -1;
        }
        int live = 0, at_barrier = 0, released = 0, count = 0;
        for (int t = 0; t < g_nthreads; t++) {
            const Fiber &f = g_fibers[(size_t)t];
            if (f.state != F_DONE) live++;
            if (f.state == F_BARRIER) { at_barrier++; count += f.bar_value; }
        }
        if (!live) {
            bank_flush();
            for (int t = 0; t < g_nthreads; t++)
                if (!g_fibers[(size_t)t].cp_open.empty() || !g_fibers[(size_t)t].cp_groups.empty()) {
                    char wh[200];
                    where(wh, sizeof wh, t);
                    report("cp.async copies still in flight when %s ended (no cp.async.wait_group "
                           "for them)", wh);
                    break;
                }
            return;
        }
        for (int w = 0; w * 32 < g_nthreads; w++) {
            int r = resolve_warp(w);
            if (r < 0) return;   /* reported; the block is abandoned */
            released += r;
        }
        if (released) continue;
        if (at_barrier == live) {
            for (int t = 0; t < g_nthreads; t++)
                if (g_fibers[(size_t)t].state == F_BARRIER) g_fibers[(size_t)t].state = F_READY;
            g_bar_result = count;
            g_epoch++;
            bank_flush();
            continue;
        }
        char wh[200];
        int waiting = -1, other = -1;
        for (int t = 0; t < g_nthreads; t++) {
            if (g_fibers[(size_t)t].state == F_BARRIER && waiting < 0) waiting = t;
            if (g_fibers[(size_t)t].state == F_WARP && other < 0) other = t;
        }
        where(wh, sizeof wh, waiting >= 0 ? waiting : other);
        report("deadlock in %s: %d of %d live threads wait at __syncthreads, %d at warp "
               "operations that cannot complete (a barrier inside divergent code, or a warp "
               "mask naming a lane that waits elsewhere)", wh, at_barrier, live, live - at_barrier);
        return;
    }
}

/* =============================================================================================
   6. Launches and atomics
   ========================================================================================== */
static cudaError_t g_last_error = cudaSuccess;
struct KernelStats { long launches, threads; double seconds; };
static std::vector<KernelStats> g_kstats;      /* per entry of g_launched */
static double g_launch_seconds;
static long g_launch_count, g_thread_count;

/* "file:line (kernel)" of an access site, by addr2line on the executable: the innermost
   inlined frame outside the emulator's own headers (an accessor's vector operator= or mma.h
   say less than the line that called them), and the outermost frame's function. */
static std::string site_name(const void *pc) {
    uintptr_t base = 0;
    char cmd[128], fn[512], line[512];
    std::string where, outer;
    dl_iterate_phdr(exe_base, &base);
    /* the return address is the instruction after the access's call */
    snprintf(cmd, sizeof cmd, "addr2line -C -f -i -e /proc/%d/exe 0x%lx 2>/dev/null", (int)getpid(),
             (unsigned long)((uintptr_t)pc - base - 1));
    FILE *f = popen(cmd, "r");
    if (f) {
        while (fgets(fn, sizeof fn, f) && fgets(line, sizeof line, f)) {
            fn[strcspn(fn, "(\n")] = 0;
            line[strcspn(line, " \n")] = 0;
            outer = fn;
            if (line[0] == '?') continue;
            if (where.empty() || where.find("tests/cuda_emu/") != std::string::npos) where = line;
        }
        pclose(f);
    }
    if (where.empty()) {
        snprintf(line, sizeof line, "%p", pc);
        return line;
    }
    size_t slash = where.rfind('/');
    return (slash == std::string::npos ? where : where.substr(slash + 1)) + " (" + outer + ")";
}
/* At exit: every kernel's requests, units (wavefronts or sectors) and ideal, then the sites
   above the ideal, most excess first (at most `sites` of them a kernel). */
static void counts_report(const char *title, const char *units,
                          const std::vector<BankCounts> &table,
                          std::map<std::pair<size_t, const void *>, BankCounts> &sites, size_t most) {
    fprintf(stderr, "mg-emu: %s\n", title);
    for (size_t k = 0; k < g_launched.size() && k < table.size(); k++) {
        const BankCounts &c = table[k];
        if (!c.requests) continue;
        fprintf(stderr, "mg-emu:   %-40s %10ld requests %10ld %s %10ld ideal %6.2fx\n",
                g_launched[k].c_str(), c.requests, c.wavefronts, units, c.ideal,
                (double)c.wavefronts / (double)c.ideal);
        std::vector<std::pair<long, const void *>> bad;
        for (const auto &s : sites)
            if (s.first.first == k && s.second.wavefronts > s.second.ideal)
                bad.push_back(std::make_pair(s.second.wavefronts - s.second.ideal, s.first.second));
        std::sort(bad.rbegin(), bad.rend());
        for (size_t b = 0; b < bad.size() && b < most; b++) {
            const BankCounts &sc = sites[std::make_pair(k, bad[b].second)];
            fprintf(stderr, "mg-emu:     %-56s %2d-byte %10ld requests %10ld %s %10ld ideal%s\n",
                    site_name(bad[b].second).c_str(), sc.size, sc.requests, sc.wavefronts, units,
                    sc.ideal, sc.uneven ? " (uneven: approximate)" : "");
        }
        if (bad.size() > most)
            fprintf(stderr, "mg-emu:     (%zu more sites above the ideal)\n", bad.size() - most);
    }
}
static void launch_log_at_exit(void) {
    const char *path = getenv("MG_EMU_LAUNCH_LOG");
    if (path && path[0]) {
        FILE *f = fopen(path, "a");
        if (f) {
            for (const std::string &k : g_launched)   /* a template's name without <args> */
                fprintf(f, "%s\n", k.substr(0, k.find('<')).c_str());
            fclose(f);
        }
    }
    if (banks_on())
        counts_report("shared-memory banks (warp-wide requests, wavefronts, ideal wavefronts; "
                      "above the ideal: bank conflicts)", "wavefronts", g_bank_kernel, g_bank_site,
                      (size_t)-1);
    if (sectors_on())
        counts_report("global memory (warp-wide requests, 32-byte sectors, ideal sectors: the "
                      "distinct bytes / 32; above the ideal: uncoalesced or misaligned)", "sectors",
                      g_sector_kernel, g_sector_site, 5);
    int stats = -1;
    if (env_switch(&stats, "MG_EMU_STATS")) {
        fprintf(stderr, "mg-emu: %ld launches, %ld threads, %.3f s in kernels (%.2f us per "
                "thread)\n", g_launch_count, g_thread_count, g_launch_seconds,
                g_thread_count ? 1e6 * g_launch_seconds / (double)g_thread_count : 0.0);
        for (size_t k = 0; k < g_launched.size(); k++)
            fprintf(stderr, "mg-emu:   %-32s %6ld launches %10ld threads %8.3f s\n",
                    g_launched[k].c_str(), g_kstats[k].launches, g_kstats[k].threads,
                    g_kstats[k].seconds);
    }
}

void *mg_emu_dynamic_shared(void) {
    need_fiber("dynamic shared memory");
    return mg_emu_dynamic_shared_buffer;
}

void mg_emu_launch_raw(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                       cudaStream_t stream, mg_emu_body_fn body, void *closure) {
    (void)stream;   /* every stream runs its work at once, in issue order */
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    struct timespec t0, t1;
    static int busy;   /* the engine's state is global: one launch at a time, process-wide */
    if (g_cur >= 0) fatal("kernel %s launched from device code (dynamic parallelism is not "
                          "emulated)", name);
    if (__atomic_exchange_n(&busy, 1, __ATOMIC_ACQUIRE))
        fatal("kernel %s launched while another host thread's launch runs: the emulator runs "
              "one launch at a time (launch from one host thread)", name);
    if (!threads || threads > 1024 || block.z > 64 || !grid.x || !grid.y || !grid.z ||
        grid.y > 65535 || grid.z > 65535 || shared_bytes > DYN_SHARED_MAX ||
        (shared_bytes > DYN_SHARED_DEFAULT &&
         (!g_dyn_granted.count(name) || g_dyn_granted[name] < shared_bytes))) {
        g_last_error = cudaErrorInvalidConfiguration;
        __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
        return;
    }
    g_kindex = (size_t)(std::find(g_launched.begin(), g_launched.end(), name) - g_launched.begin());
    if (g_kindex == g_launched.size()) {
        if (g_launched.empty()) atexit(launch_log_at_exit);
        g_launched.push_back(name);
        g_kstats.push_back({0, 0, 0.0});
    }
    if (!g_shuffle_known) {
        const char *e = getenv("MG_EMU_SHUFFLE");
        g_shuffle_seed = e ? (unsigned)strtoul(e, NULL, 10) : 0;
        g_shuffle_known = 1;
    }
    g_rng = 0x9E3779B97F4A7C15ull ^ g_shuffle_seed;
    dev_init();
    shared_init();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    g_nthreads = (int)threads;
    while (g_fibers.size() < (size_t)g_nthreads) {
        Fiber f = Fiber();   /* zeroed scalars, empty cp.async lists */
        /* a guard page below each stack turns an overflow into a fault */
        char *mem = (char *)mmap(NULL, STACK_BYTES + 4096, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED) fatal("cannot allocate fiber stacks");
        mprotect(mem, 4096, PROT_NONE);
        f.stack = mem + 4096;
        g_fibers.push_back(f);
    }
    for (int t = 0; t < g_nthreads; t++) {
        Fiber &f = g_fibers[(size_t)t];
        f.tid.x = (unsigned)t % block.x;
        f.tid.y = (unsigned)t / block.x % block.y;
        f.tid.z = (unsigned)t / (block.x * block.y);
    }
    if (g_s_epoch.size() < g_tls_size) {
        g_s_epoch.assign(g_tls_size, 0);
        g_s_writer.assign(g_tls_size, -1);
        g_s_reader.assign(g_tls_size, -1);
        g_s_written.assign(g_tls_size, 0);
        g_s_wsync_w.assign(g_tls_size, 0);
        g_s_wsync_r.assign(g_tls_size, 0);
        g_s_rwarp.assign(g_tls_size, -1);
    }
    g_kernel = name;
    mark_foreign();
    g_dyn_bytes = shared_bytes;
    g_body = body;
    g_closure = closure;
    g_launch_reports = 0;
    gridDim = grid;
    blockDim = block;
    g_sh_lo = (uintptr_t)g_tls;
    g_sh_span = g_tls_size;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
                run_block();
            }
    g_sh_span = 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    g_launch_seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    {
        double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        long nt = (long)threads * grid.x * grid.y * grid.z;
        KernelStats &ks = g_kstats[g_kindex];
        g_launch_count++;
        g_thread_count += nt;
        ks.launches++;
        ks.threads += nt;
        ks.seconds += sec;
    }
    if (g_launch_reports && !collecting())
        fatal("%d report%s in kernel %s; stopping (MG_EMU_CONTINUE=1 goes on)", g_launch_reports,
              g_launch_reports == 1 ? "" : "s", name);
    g_launch_reports = 0;   /* host-side reports until the next launch count on their own */
    __atomic_store_n(&busy, 0, __ATOMIC_RELEASE);
}

/* An atomic's address: device memory inside an allocation (marked written), or shared memory
   inside a variable; anything else is reported. Atomics never count as races.             */
static void atomic_check(const void *p, size_t n) {
    char w[200];
    if (g_cur < 0) fatal("atomic on %p called outside a kernel", p);
    if (is_dev(p)) {
        size_t off = (size_t)((const char *)p - g_dev);
        for (size_t i = 0; i < n; i++)
            if (off + i >= g_dev_used || g_shadow[off + i] < SH_UNWRITTEN) {
                where(w, sizeof w, g_cur);
                report("out-of-bounds device memory atomic in %s: %zu bytes at %s", w, n,
                       describe_dev(p).c_str());
                return;
            }
        memset(g_shadow + off, SH_WRITTEN, n);
    } else if ((uintptr_t)p - g_sh_lo < g_sh_span) {
        size_t off = (uintptr_t)p - g_sh_lo;
        const SharedVar *v = svar_at(off);
        if (!v || off + n > v->off + (v->off == g_dyn_off ? g_dyn_bytes : v->size)) {
            where(w, sizeof w, g_cur);
            report("out-of-bounds shared memory atomic in %s: %zu bytes at %p", w, n, p);
            return;
        }
        for (size_t b = off; b < off + n; b++) g_s_written[b] = g_block_serial;
    }
}
#define MG_EMU_ATOMIC(T, NAME, EXPR) \
    T NAME(T *p, T v) { atomic_check(p, sizeof *p); T old = *p; *p = (EXPR); return old; }
MG_EMU_ATOMIC(float, atomicAdd, old + v)
MG_EMU_ATOMIC(double, atomicAdd, old + v)
MG_EMU_ATOMIC(int, atomicAdd, (int)((unsigned)old + (unsigned)v))
MG_EMU_ATOMIC(unsigned int, atomicAdd, old + v)
MG_EMU_ATOMIC(unsigned long long, atomicAdd, old + v)
MG_EMU_ATOMIC(int, atomicExch, v)
MG_EMU_ATOMIC(unsigned int, atomicExch, v)
MG_EMU_ATOMIC(float, atomicExch, v)
MG_EMU_ATOMIC(int, atomicMax, old > v ? old : v)
MG_EMU_ATOMIC(unsigned int, atomicMax, old > v ? old : v)
MG_EMU_ATOMIC(int, atomicMin, old < v ? old : v)
MG_EMU_ATOMIC(unsigned int, atomicMin, old < v ? old : v)
#undef MG_EMU_ATOMIC
#define MG_EMU_CAS(T) \
    T atomicCAS(T *p, T compare, T v) { \
        atomic_check(p, sizeof *p); T old = *p; if (old == compare) *p = v; return old; }
MG_EMU_CAS(int)
MG_EMU_CAS(unsigned int)
MG_EMU_CAS(unsigned long long)
#undef MG_EMU_CAS

/* =============================================================================================
   7. Runtime API: one emulated device; streams run their work at the call, so every stream is
      always complete and every recorded event has happened.
   ========================================================================================== */
/* A recorded piece of a stream capture: a kernel (its closure shared by the graphs that hold
   it), a memset or a device-to-device copy.                                                */
struct emu_node {
    enum { KERNEL, MEMSET, COPY } kind;
    std::string name;
    dim3 grid, block;
    size_t shared, n;
    mg_emu_body_fn body;
    std::shared_ptr<void> closure;
    void *dst;
    const void *src;
    int value;
};
struct CUgraph_st { std::vector<emu_node> nodes; };
struct CUgraphExec_st { std::vector<emu_node> nodes; };
struct CUstream_st {
    int flags, priority;
    int capture;                       /* cudaStreamCaptureStatus */
    std::vector<emu_node> *recorded;   /* while capturing */
};
static int g_captures;                 /* streams capturing now (cuBLAS/NCCL refuse then) */
/* An event's time is the host's monotonic clock when its stream reaches it: at the record
   call, since every stream has run all its work by then. */
struct CUevent_st { int recorded; unsigned int flags; double t_ms; };
static double host_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

cudaError_t cudaGetDeviceCount(int *count) { *count = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int *device) { *device = 0; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "mg-emu (CUDA emulated on the CPU)");
    prop->totalGlobalMem = DEV_RESERVE;
    prop->sharedMemPerBlock = DYN_SHARED_MAX;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024; prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647; prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->major = 8; prop->minor = 0; prop->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) { cudaError_t e = g_last_error; g_last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    default: return "unknown error";
    }
}
cudaError_t cudaMalloc(void **ptr, size_t size) {
    dev_init();
    size_t need = (size + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN;
    size_t start = g_dev_used + DEV_ALIGN, end = start + need + DEV_ALIGN;  /* redzones */
    if (end > DEV_RESERVE) return cudaErrorMemoryAllocation;
    size_t page = 4096, lo = g_dev_used / page * page, hi = (end + page - 1) / page * page;
    if (mprotect(g_dev + lo, hi - lo, PROT_READ | PROT_WRITE) ||
        mprotect(g_shadow + lo, hi - lo, PROT_READ | PROT_WRITE))
        return cudaErrorMemoryAllocation;
    memset(g_shadow + start, SH_UNWRITTEN, size);
    g_allocs.push_back({start, size, (int)g_allocs.size() + 1, 0});
    g_dev_used = end;
    *ptr = g_dev + start;
    return cudaSuccess;
}
/* total = the reserved region; used = the live allocations with their redzones. */
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    size_t used = 0;
    if (!free_bytes || !total) return cudaErrorInvalidValue;
    for (const Alloc &a : g_allocs)
        if (!a.freed) used += (a.size + DEV_ALIGN - 1) / DEV_ALIGN * DEV_ALIGN + DEV_ALIGN;
    *total = DEV_RESERVE;
    *free_bytes = DEV_RESERVE - used;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    for (Alloc &a : g_allocs)
        if (g_dev + a.off == (char *)p && !a.freed) {
            a.freed = 1;
            memset(g_shadow + a.off, SH_FREED, a.size);
            return cudaSuccess;
        }
    report("cudaFree(%p): not a live cudaMalloc pointer (%s)", p,
           is_dev(p) ? describe_dev(p).c_str() : "a host address");
    return cudaErrorInvalidValue;
}
/* Host synchronisations: the calls after which the host has waited for the device's queued
   work (CUDA's "API synchronization behavior"): cudaDeviceSynchronize, cudaStreamSynchronize,
   cudaEventSynchronize, every cudaMemcpy (synchronous: it waits for the legacy stream even
   from pageable memory), and cudaMemcpyAsync to the host (it returns once the copy is done).
   A cudaMemcpyAsync from (pageable) host memory to the device only stages the bytes: no wait,
   not counted. mg_emu_host_syncs() returns the count so far.                               */
static long g_host_syncs;
long mg_emu_host_syncs(void) { return g_host_syncs; }

/* Copies check the device side's bounds (and, read from device, that the bytes were written:
   copying uninitialised device memory to the host is reported).                           */
static cudaError_t emu_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    if (!n) return cudaSuccess;
    if ((is_dev(src) && !dev_range_ok("cudaMemcpy source", src, n)) ||
        (is_dev(dst) && !dev_range_ok("cudaMemcpy destination", dst, n))) {
        if (!collecting()) fatal("stopping after a bad cudaMemcpy");
        return cudaErrorInvalidValue;
    }
    if ((kind == cudaMemcpyHostToDevice && (!is_dev(dst) || is_dev(src))) ||
        (kind == cudaMemcpyDeviceToHost && (!is_dev(src) || is_dev(dst))) ||
        (kind == cudaMemcpyDeviceToDevice && (!is_dev(src) || !is_dev(dst))) ||
        (kind == cudaMemcpyHostToHost && (is_dev(src) || is_dev(dst)))) {
        report("cudaMemcpy of %zu bytes from %p to %p: kind %d does not match where the pointers "
               "are", n, src, dst, (int)kind);
        if (!collecting()) fatal("stopping after a bad cudaMemcpy");
        return cudaErrorInvalidValue;
    }
    memmove(dst, src, n);
    dev_mark(dst, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
    g_host_syncs++;
    return emu_copy(dst, src, n, kind);
}
/* A capturing stream records device-to-device copies and memsets; anything touching the
   host (or waiting) fails as CUDA's capture does and invalidates the capture.              */
static cudaError_t capture_refuse(cudaStream_t s) {
    if (s->capture == cudaStreamCaptureStatusActive) {
        s->capture = cudaStreamCaptureStatusInvalidated;
        g_captures--;
    }
    return cudaErrorStreamCaptureUnsupported;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
    if (s && s->capture) {
        emu_node d;
        if (s->capture != cudaStreamCaptureStatusActive || kind != cudaMemcpyDeviceToDevice)
            return capture_refuse(s);
        d.kind = emu_node::COPY; d.dst = dst; d.src = src; d.n = n;
        s->recorded->push_back(d);
        return cudaSuccess;
    }
    if (kind == cudaMemcpyDeviceToHost && n) g_host_syncs++;
    return emu_copy(dst, src, n, kind);
}
/* Row by row: each row is one checked cudaMemcpy (pitches at least the width, as CUDA's).   */
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t) {
    if (dpitch < width || spitch < width) {
        report("cudaMemcpy2DAsync: pitches %zu, %zu below the width %zu", dpitch, spitch, width);
        if (!collecting()) fatal("stopping after a bad cudaMemcpy2DAsync");
        return cudaErrorInvalidValue;
    }
    for (size_t r = 0; r < height; r++) {
        cudaError_t e = cudaMemcpy((char *)dst + r * dpitch, (const char *)src + r * spitch,
                                   width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t n) {
    if (!n) return cudaSuccess;
    if (!is_dev(p) || !dev_range_ok("cudaMemset", p, n)) {
        if (!collecting()) fatal("stopping after a bad cudaMemset");
        return cudaErrorInvalidValue;
    }
    memset(p, value, n);
    dev_mark(p, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
    if (s && s->capture) {
        emu_node d;
        if (s->capture != cudaStreamCaptureStatusActive) return capture_refuse(s);
        d.kind = emu_node::MEMSET; d.dst = p; d.value = value; d.n = n;
        s->recorded->push_back(d);
        return cudaSuccess;
    }
    return cudaMemset(p, value, n);
}
cudaError_t cudaDeviceSynchronize(void) { g_host_syncs++; return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    *s = new CUstream_st{(int)flags, priority, cudaStreamCaptureStatusNone, NULL};
    return cudaSuccess;
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    *least = 0; *greatest = -5;   /* as an A100/H100 reports */
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s && s->capture) return capture_refuse(s);
    g_host_syncs++;
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t e, unsigned int) {
    return e ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    *e = new CUevent_st{0, flags, 0.0};
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    if (!e) return cudaErrorInvalidValue;
    e->recorded = 1;
    e->t_ms = host_ms();
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidValue; }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    g_host_syncs++;
    return e ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
/* CUDA's rules: an event never recorded, or created with cudaEventDisableTiming, is
   cudaErrorInvalidResourceHandle; both recorded events have completed here.               */
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!ms || !start || !end) return cudaErrorInvalidValue;
    if (!start->recorded || !end->recorded || (start->flags & cudaEventDisableTiming) ||
        (end->flags & cudaEventDisableTiming))
        return cudaErrorInvalidResourceHandle;
    *ms = (float)(end->t_ms - start->t_ms);
    return cudaSuccess;
}

/* --- stream capture and graphs ---------------------------------------------------------- */
int mg_emu_capturing(cudaStream_t s) { return s && s->capture; }
void mg_emu_capture_launch(const char *name, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t s, mg_emu_body_fn body, void *closure,
                           void (*free_closure)(void *)) {
    emu_node d;
    if (s->capture != cudaStreamCaptureStatusActive) {   /* invalidated: CUDA drops it too */
        free_closure(closure);
        g_last_error = cudaErrorStreamCaptureInvalidated;
        return;
    }
    d.kind = emu_node::KERNEL; d.name = name; d.grid = grid; d.block = block;
    d.shared = shared_bytes; d.body = body; d.closure = std::shared_ptr<void>(closure, free_closure);
    s->recorded->push_back(d);
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode) {
    if (!s || s->capture) return cudaErrorInvalidValue;   /* the legacy stream cannot capture */
    s->capture = cudaStreamCaptureStatusActive;
    s->recorded = new std::vector<emu_node>();
    g_captures++;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    int status = s ? s->capture : 0;
    if (!status) return cudaErrorInvalidValue;
    if (status == cudaStreamCaptureStatusActive) g_captures--;
    s->capture = cudaStreamCaptureStatusNone;
    if (status == cudaStreamCaptureStatusInvalidated) {
        delete s->recorded;
        s->recorded = NULL;
        *graph = NULL;
        return cudaErrorStreamCaptureInvalidated;
    }
    *graph = new CUgraph_st{std::move(*s->recorded)};
    delete s->recorded;
    s->recorded = NULL;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    *status = s ? (enum cudaStreamCaptureStatus)s->capture : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g, unsigned long long) {
    if (!g) return cudaErrorInvalidValue;
    *exec = new CUgraphExec_st{g->nodes};
    return cudaSuccess;
}
/* The recorded work in its order, on the given stream, as if issued now. */
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!exec) return cudaErrorInvalidValue;
    if (s && s->capture) return capture_refuse(s);
    for (const emu_node &d : exec->nodes) {
        cudaError_t e = cudaSuccess;
        if (d.kind == emu_node::KERNEL)
            mg_emu_launch_raw(d.name.c_str(), d.grid, d.block, d.shared, s, d.body, d.closure.get());
        else if (d.kind == emu_node::MEMSET) e = cudaMemset(d.dst, d.value, d.n);
        else e = emu_copy(d.dst, d.src, d.n, cudaMemcpyDeviceToDevice);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) { delete exec; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }

/* =============================================================================================
   8. cuBLAS: GEMMs through cblas_sgemm with the caller's arguments.
   ========================================================================================== */
struct cublasContext { cudaStream_t stream; cublasPointerMode_t pmode; cublasMath_t math; };

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = new cublasContext{NULL, CUBLAS_POINTER_MODE_HOST, CUBLAS_DEFAULT_MATH};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
/* The workspace must lie inside a live allocation (the GEMMs here need none of it). */
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void *w, size_t n) {
    if (!h || (n && (!is_dev(w) || !dev_range_ok("cublasSetWorkspace", w, n))))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t h, cudaStream_t *s) { *s = h->stream; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetPointerMode(cublasHandle_t h, cublasPointerMode_t m) { h->pmode = m; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetPointerMode(cublasHandle_t h, cublasPointerMode_t *m) { *m = h->pmode; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { h->math = m; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasGetMathMode(cublasHandle_t h, cublasMath_t *m) { *m = h->math; return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

float mg_emu_bf16_to_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
uint16_t mg_emu_f32_to_bf16(float f) {   /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}
float mg_emu_f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 0x1F, m = h & 0x3FF, u;
    float f;
    if (e == 0x1F) u = s | 0x7F800000u | (m << 13);
    else if (e) u = s | ((e + 112) << 23) | (m << 13);
    else { f = (float)m * (1.0f / 16777216.0f); return s ? -f : f; }   /* subnormal or zero */
    memcpy(&f, &u, 4);
    return f;
}
uint16_t mg_emu_f32_to_f16(float f) {
    uint32_t u, s, a;
    memcpy(&u, &f, 4);
    s = (u >> 16) & 0x8000u;
    a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(s | 0x7E00u);
    if (a >= 0x477FF000u) return (uint16_t)(s | 0x7C00u);     /* rounds to inf */
    if (a < 0x38800000u) {                                     /* subnormal: exact scaling */
        float v;
        memcpy(&v, &a, 4);
        return (uint16_t)(s | (uint32_t)nearbyintf(v * 16777216.0f));
    }
    a += 0xFFFu + ((a >> 13) & 1);
    return (uint16_t)(s | ((a - 0x38000000u) >> 13));
}
static size_t dt_size(cudaDataType t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2; }
static void to_f32(float *dst, const void *src, cudaDataType t, size_t n) {
    if (t == CUDA_R_32F) memcpy(dst, src, n * 4);
    else if (t == CUDA_R_16BF) for (size_t i = 0; i < n; i++) dst[i] = mg_emu_bf16_to_f32(((const uint16_t *)src)[i]);
    else for (size_t i = 0; i < n; i++) dst[i] = mg_emu_f16_to_f32(((const uint16_t *)src)[i]);
}
static void from_f32(void *dst, const float *src, cudaDataType t, size_t n) {
    if (t == CUDA_R_32F) memcpy(dst, src, n * 4);
    else if (t == CUDA_R_16BF) for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mg_emu_f32_to_bf16(src[i]);
    else for (size_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = mg_emu_f32_to_f16(src[i]);
}
/* Elements a column-major rows × cols matrix with leading dimension ld spans. */
static size_t footprint(int rows, int cols, int ld) {
    return rows && cols ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0;
}
static int gemm_operand_ok(const char *name, const void *p, cudaDataType t, size_t elems) {
    if (!elems) return 1;
    if (!is_dev(p)) {
        report("cuBLAS GEMM: %s = %p is not device memory", name, p);
        return 0;
    }
    char who[64];
    snprintf(who, sizeof who, "cuBLAS GEMM operand %s", name);
    return dev_range_ok(who, p, elems * dt_size(t));
}

static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const void *alpha, const void *A, cudaDataType at,
                           int lda, long long sA, const void *B, cudaDataType bt, int ldb,
                           long long sB, const void *beta, void *C, cudaDataType ct, int ldc,
                           long long sC, int batch, cublasComputeType_t compute) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mg_emu_capturing(h->stream))
        fatal("cuBLAS GEMM on a capturing stream: graph capture of cuBLAS is not emulated");
    if (compute != CUBLAS_COMPUTE_32F || at != bt || (at != CUDA_R_32F && at != CUDA_R_16F &&
        at != CUDA_R_16BF) || (ct != at && ct != CUDA_R_32F) || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T)) {
        report("cuBLAS GEMM: type/op combination not emulated (A %d, B %d, C %d, compute %d, ops "
               "%d %d)", (int)at, (int)bt, (int)ct, (int)compute, (int)ta, (int)tb);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, ta ? k : m) ||
        ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (h->pmode != CUBLAS_POINTER_MODE_HOST) {
        report("cuBLAS GEMM: device pointer mode is not emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    float al = *(const float *)alpha, be = *(const float *)beta;
    size_t fa = footprint(ta ? k : m, ta ? m : k, lda), fb = footprint(tb ? n : k, tb ? k : n, ldb);
    size_t fc = footprint(m, n, ldc);
    std::vector<float> a32, b32, c32(fc);
    for (int b = 0; b < batch; b++) {
        const char *Ab = (const char *)A + (size_t)b * (size_t)sA * dt_size(at);
        const char *Bb = (const char *)B + (size_t)b * (size_t)sB * dt_size(bt);
        char *Cb = (char *)C + (size_t)b * (size_t)sC * dt_size(ct);
        if ((k && (!gemm_operand_ok("A", Ab, at, fa) || !gemm_operand_ok("B", Bb, bt, fb))) ||
            !gemm_operand_ok("C", Cb, ct, fc)) {
            if (!collecting()) fatal("stopping after a bad cuBLAS GEMM");
            return CUBLAS_STATUS_EXECUTION_FAILED;
        }
        const float *a = (const float *)Ab, *bb = (const float *)Bb;
        if (at != CUDA_R_32F) { a32.resize(fa); to_f32(a32.data(), Ab, at, fa); a = a32.data(); }
        if (bt != CUDA_R_32F) { b32.resize(fb); to_f32(b32.data(), Bb, bt, fb); bb = b32.data(); }
        /* β = 0: C is not read (it may hold NaN), as BLAS specifies */
        if (be == 0.0f) std::fill(c32.begin(), c32.end(), 0.0f);
        else for (int j = 0; j < n; j++) to_f32(&c32[(size_t)j * ldc], Cb + (size_t)j * ldc * dt_size(ct), ct, (size_t)m);
        if (m && n) {
            if (k) cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                               m, n, k, al, a, lda, bb, ldb, be, c32.data(), ldc);
            else for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) c32[(size_t)j * ldc + i] *= be;
        }
        for (int j = 0; j < n; j++) {
            char *col = Cb + (size_t)j * ldc * dt_size(ct);
            from_f32(col, &c32[(size_t)j * ldc], ct, (size_t)m);
            dev_mark(col, (size_t)m * dt_size(ct));
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
    return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                compute);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sA, const void *B, cudaDataType bt,
                                          int ldb, long long sB, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sC, int batch,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
    return gemm(h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC,
                batch, compute);
}

/* =============================================================================================
   8b. cuBLASLt: descriptors hold what the caller set; the heuristic accepts exactly the
       combinations below (the documented constraints of the epilogues the library uses) and
       refuses the rest with CUBLAS_STATUS_NOT_SUPPORTED; cublasLtMatmul computes op(A)·op(B)
       in fp32 through cblas_sgemm, D = α·AB + β·C, then the epilogue on each fp32 value of D
       (column-major, row i of m):
         BIAS           v += bias[i]
         GELU_AUX(_BIAS) v (+= bias[i]); aux[i, j] = v; v = gelu(v)
         DGELU(_BGRAD)  v *= gelu'(aux[i, j]); bias[i] = Σ_j v   (the bias gradient)
       gelu(x) = ½x(1 + tanh(√(2/π)(x + 0.044715x³))). D, aux and the bias gradient are
       rounded once to D's type (aux and bias types default to it and no other is emulated).
   ========================================================================================== */
struct cublasLtContext { int live; };
struct mg_emu_lt_desc {
    cublasComputeType_t compute; cudaDataType scale;
    int32_t pmode, ta, tb, tc; uint32_t epi;
    const void *bias; const void *aux; int64_t aux_ld; int32_t aux_type, bias_type;
};
struct mg_emu_lt_layout { cudaDataType type; uint64_t rows, cols; int64_t ld; };
struct mg_emu_lt_pref { uint64_t workspace; uint32_t reduction, align[4], search; };

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) { *h = new cublasLtContext{1}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) { delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t c, cudaDataType s) {
    *d = new mg_emu_lt_desc{c, s, 0, CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                            NULL, NULL, 0, -1, -1};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { delete d; return CUBLAS_STATUS_SUCCESS; }
/* Each attribute has cuBLASLt's storage size; a different sizeInBytes is INVALID_VALUE. */
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                              const void *buf, size_t n) {
    void *dst;
    size_t want;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: dst = &d->compute; want = 4; break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: dst = &d->scale; want = 4; break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: dst = &d->pmode; want = 4; break;
    case CUBLASLT_MATMUL_DESC_TRANSA: dst = &d->ta; want = 4; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: dst = &d->tb; want = 4; break;
    case CUBLASLT_MATMUL_DESC_TRANSC: dst = &d->tc; want = 4; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: dst = &d->epi; want = 4; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: dst = &d->bias; want = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: dst = &d->aux; want = sizeof(void *); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: dst = &d->aux_ld; want = 8; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: dst = &d->aux_type; want = 4; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: dst = &d->bias_type; want = 4; break;
    default:
        report("cuBLASLt: matmul descriptor attribute %d is not emulated", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!buf || n != want) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, n);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    *l = new mg_emu_lt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { delete l; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new mg_emu_lt_pref{0, CUBLASLT_REDUCTION_SCHEME_MASK, {256, 256, 256, 256}, 0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { delete p; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a,
                                                    const void *buf, size_t n) {
    void *dst;
    size_t want = 4;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: dst = &p->search; break;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: dst = &p->workspace; want = 8; break;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: dst = &p->reduction; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: dst = &p->align[0]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: dst = &p->align[1]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: dst = &p->align[2]; break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: dst = &p->align[3]; break;
    default:
        report("cuBLASLt: preference attribute %d is not emulated", (int)a);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!buf || n != want) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(dst, buf, n);
    return CUBLAS_STATUS_SUCCESS;
}
static int lt_has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
static int lt_has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
/* The problem is valid and emulated: NULL, or why not. */
static const char *lt_refusal(const mg_emu_lt_desc *d, const mg_emu_lt_layout *A,
                              const mg_emu_lt_layout *B, const mg_emu_lt_layout *C,
                              const mg_emu_lt_layout *D) {
    uint64_t m = D->rows, n = D->cols, k = d->ta ? A->rows : A->cols;
    uint32_t e = d->epi;
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F || d->pmode != 0)
        return "compute type, scale type or pointer mode (only 32F, 32F, host)";
    if ((d->ta != CUBLAS_OP_N && d->ta != CUBLAS_OP_T) || (d->tb != CUBLAS_OP_N && d->tb != CUBLAS_OP_T) ||
        d->tc != CUBLAS_OP_N)
        return "transpose (A, B: N or T; C: N)";
    if (A->type != B->type || (A->type != CUDA_R_32F && A->type != CUDA_R_16F && A->type != CUDA_R_16BF) ||
        (D->type != A->type && D->type != CUDA_R_32F) || C->type != D->type)
        return "data types (A = B in 32F/16F/16BF; C = D, the same or 32F)";
    if ((d->ta ? A->cols : A->rows) != m || (d->tb ? B->rows : B->cols) != n ||
        (d->tb ? B->cols : B->rows) != k || C->rows != m || C->cols != n)
        return "layout shapes do not match op(A)·op(B) = D";
    if (A->ld < (int64_t)std::max<uint64_t>(1, A->rows) || B->ld < (int64_t)std::max<uint64_t>(1, B->rows) ||
        D->ld < (int64_t)std::max<uint64_t>(1, m) || C->ld != D->ld)
        return "leading dimensions";
    if (e != CUBLASLT_EPILOGUE_DEFAULT && e != CUBLASLT_EPILOGUE_BIAS && !lt_has_aux(e))
        return "epilogue not emulated";
    if (lt_has_bias(e) && (!d->bias || (d->bias_type != -1 && d->bias_type != (int32_t)D->type)))
        return "bias pointer unset, or a bias type other than D's";
    if (lt_has_aux(e) && (!d->aux || d->aux_ld % 8 || d->aux_ld < (int64_t)m ||
                          (d->aux_type != -1 && d->aux_type != (int32_t)D->type)))
        return "aux pointer unset, aux ld not a multiple of 8 at least D's rows, or an aux type other than D's";
    return NULL;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                                              cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t res[], int *count) {
    if (!h || !d || !A || !B || !C || !D || !pref || requested < 1 || !res || !count)
        return CUBLAS_STATUS_INVALID_VALUE;
    *count = 0;
    if (lt_refusal(d, A, B, C, D)) return CUBLAS_STATUS_NOT_SUPPORTED;
    memset(&res[0], 0, sizeof res[0]);
    res[0].algo.data[0] = 0x6d67656d75ull;   /* "mgemu": the one emulated algorithm */
    res[0].state = CUBLAS_STATUS_SUCCESS;
    res[0].wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}
static float lt_gelu_tanh(float x, float *grad) {
    const float c = 0.7978845608028654f, a = 0.044715f;
    float t = tanhf(c * (x + a * x * x * x));
    *grad = 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * a * x * x);
    return 0.5f * x * (1.0f + t);
}
static int lt_read_ok(const char *who, const void *p, size_t bytes) {
    if (!is_dev(p)) { report("cuBLASLt matmul: %s = %p is not device memory", who, p); return 0; }
    if (!dev_range_ok(who, p, bytes)) return 0;
    for (size_t i = 0; i < bytes; i++)
        if (g_shadow[(const char *)p - g_dev + i] == SH_UNWRITTEN) {
            report("cuBLASLt matmul: %s reads byte %zu of %s, never written", who, i,
                   describe_dev((const char *)p + i).c_str());
            return 0;
        }
    return 1;
}
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Al, const void *B,
                              cublasLtMatrixLayout_t Bl, const void *beta, const void *C,
                              cublasLtMatrixLayout_t Cl, void *D, cublasLtMatrixLayout_t Dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                              cudaStream_t) {
    if (!h || !d || !Al || !Bl || !Cl || !Dl || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    const char *why = lt_refusal(d, Al, Bl, Cl, Dl);
    if (why) { report("cuBLASLt matmul: %s", why); return CUBLAS_STATUS_NOT_SUPPORTED; }
    if (!algo || algo->data[0] != 0x6d67656d75ull) {
        report("cuBLASLt matmul: the algorithm was not returned by cublasLtMatmulAlgoGetHeuristic");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ws_bytes && !dev_range_ok("cuBLASLt workspace", ws, ws_bytes)) return CUBLAS_STATUS_EXECUTION_FAILED;
    int m = (int)Dl->rows, n = (int)Dl->cols, k = (int)(d->ta ? Al->rows : Al->cols);
    int lda = (int)Al->ld, ldb = (int)Bl->ld, ldd = (int)Dl->ld;
    cudaDataType at = Al->type, dt = Dl->type;
    size_t fa = footprint((int)Al->rows, (int)Al->cols, lda), fb = footprint((int)Bl->rows, (int)Bl->cols, ldb);
    size_t fd = footprint(m, n, ldd), sz = dt_size(dt);
    float al = *(const float *)alpha, be = *(const float *)beta;
    uint32_t e = d->epi;
    if ((k && (!gemm_operand_ok("A", A, at, fa) || !gemm_operand_ok("B", B, at, fb))) ||
        !gemm_operand_ok("D", D, dt, fd) || (be != 0.0f && !lt_read_ok("C", C, fd * sz))) {
        if (!collecting()) fatal("stopping after a bad cuBLASLt matmul");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    std::vector<float> a32(fa), b32(fb), v((size_t)m * n, 0.0f), aux;
    to_f32(a32.data(), A, at, fa);
    to_f32(b32.data(), B, at, fb);
    if (m && n && k)
        cblas_sgemm(CblasColMajor, d->ta ? CblasTrans : CblasNoTrans, d->tb ? CblasTrans : CblasNoTrans,
                    m, n, k, al, a32.data(), lda, b32.data(), ldb, 0.0f, v.data(), m);
    if (be != 0.0f)
        for (int j = 0; j < n; j++) {
            std::vector<float> c(m);
            to_f32(c.data(), (const char *)C + (size_t)j * ldd * sz, dt, (size_t)m);
            for (int i = 0; i < m; i++) v[(size_t)j * m + i] += be * c[i];
        }
    std::vector<float> bias(m, 0.0f);
    if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        if (!lt_read_ok("bias", d->bias, (size_t)m * sz)) fatal("stopping after a bad cuBLASLt matmul");
        to_f32(bias.data(), d->bias, dt, (size_t)m);
    }
    size_t faux = footprint(m, n, (int)d->aux_ld);
    if (e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        if (!lt_read_ok("aux (the GELU input)", d->aux, faux * sz)) fatal("stopping after a bad cuBLASLt matmul");
        aux.resize(faux);
        to_f32(aux.data(), d->aux, dt, faux);
    }
    if ((e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) &&
        !gemm_operand_ok("aux", d->aux, dt, faux))
        fatal("stopping after a bad cuBLASLt matmul");
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD && !gemm_operand_ok("bias gradient", d->bias, dt, (size_t)m))
        fatal("stopping after a bad cuBLASLt matmul");
    std::vector<float> pre(e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ? (size_t)m : 0);
    for (int j = 0; j < n; j++) {
        float *col = &v[(size_t)j * m];
        for (int i = 0; i < m; i++) {
            float x = col[i] + bias[i], g;
            switch (e) {
            case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
                pre[i] = x;
                x = lt_gelu_tanh(x, &g);
                break;
            case CUBLASLT_EPILOGUE_DGELU: case CUBLASLT_EPILOGUE_DGELU_BGRAD:
                lt_gelu_tanh(aux[(size_t)j * d->aux_ld + i], &g);
                x *= g;
                break;
            default: break;
            }
            col[i] = x;
        }
        if (!pre.empty()) {
            char *ac = (char *)d->aux + (size_t)j * d->aux_ld * sz;
            from_f32(ac, pre.data(), dt, (size_t)m);
            dev_mark(ac, (size_t)m * sz);
        }
        char *dc = (char *)D + (size_t)j * ldd * sz;
        from_f32(dc, col, dt, (size_t)m);
        dev_mark(dc, (size_t)m * sz);
    }
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {   /* Σ over D's columns, in column order, in fp32 */
        std::vector<float> s(m, 0.0f);
        for (int j = 0; j < n; j++) for (int i = 0; i < m; i++) s[i] += v[(size_t)j * m + i];
        from_f32((void *)d->bias, s.data(), dt, (size_t)m);
        dev_mark(d->bias, (size_t)m * sz);
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* =============================================================================================
   9. NCCL over MPI. Each communicator owns an MPI communicator. Data is reduced in fp32 (fp64
      for ncclDouble) with MPI_Allreduce and rounded once to its type.
   ========================================================================================== */
struct ncclComm {
#ifdef MG_USE_MPI
    MPI_Comm mpi;
#endif
    int rank, size;
};
static const char *g_nccl_error = "";

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "unhandled system error";
    case ncclInProgress: return "operation in progress";
    default: return "internal error";
    }
}
const char *ncclGetLastError(ncclComm_t) { return g_nccl_error; }
static ncclResult_t nccl_fail(ncclResult_t r, const char *why) {
    g_nccl_error = why;
    fprintf(stderr, "mg-emu: NCCL: %s\n", why);
    return r;
}
static int mpi_up(void) {
#ifdef MG_USE_MPI
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    return up && !down;
#else
    return 0;
#endif
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "mg-emu", 6);
    return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *) {
    if (memcmp(id.internal, "mg-emu", 6)) return nccl_fail(ncclInvalidArgument, "unique id not from ncclGetUniqueId");
    if (rank < 0 || rank >= nranks) return nccl_fail(ncclInvalidArgument, "rank outside [0, nranks)");
    ncclComm *c = new ncclComm;
    c->rank = rank;
    c->size = nranks;
#ifdef MG_USE_MPI
    if (mpi_up()) {
        int world = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &world);
        if (world != nranks) {
            delete c;
            return nccl_fail(ncclInvalidUsage, "emulated ncclCommInitRank spans the whole MPI "
                             "world only (make sub-communicators with ncclCommSplit)");
        }
        MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mpi);
    } else c->mpi = MPI_COMM_NULL;
#endif
    if (nranks > 1 && !mpi_up()) { delete c; return nccl_fail(ncclSystemError, "more than one rank needs MPI"); }
    *comm = c;
    return ncclSuccess;
}
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *) {
    *newcomm = NULL;
#ifdef MG_USE_MPI
    if (comm->mpi != MPI_COMM_NULL) {
        MPI_Comm sub;
        MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &sub);
        if (sub == MPI_COMM_NULL) return ncclSuccess;
        ncclComm *c = new ncclComm;
        c->mpi = sub;
        MPI_Comm_rank(sub, &c->rank);
        MPI_Comm_size(sub, &c->size);
        *newcomm = c;
        return ncclSuccess;
    }
#endif
    (void)key;
    if (color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
    *newcomm = new ncclComm(*comm);
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
#ifdef MG_USE_MPI
    if (comm && comm->mpi != MPI_COMM_NULL && mpi_up()) MPI_Comm_free(&comm->mpi);
#endif
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { delete comm; return ncclSuccess; }
ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *e) { *e = ncclSuccess; return ncclSuccess; }

static size_t nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}
static int nccl_float(ncclDataType_t t) { return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32; }
static cudaDataType nccl_cuda(ncclDataType_t t) {
    return t == ncclFloat16 ? CUDA_R_16F : t == ncclBfloat16 ? CUDA_R_16BF : CUDA_R_32F;
}
/* A buffer's bytes must be device memory inside allocations. */
static int nccl_buf_ok(const char *who, const void *p, size_t bytes) {
    if (g_captures)
        fatal("%s while a stream captures: graph capture of NCCL is not emulated", who);
    if (!bytes) return 1;
    if (!is_dev(p)) { report("%s: buffer %p is not device memory", who, p); return 0; }
    return dev_range_ok(who, p, bytes);
}
#define NCCL_BUF(who, p, bytes) do { if (!nccl_buf_ok(who, p, bytes)) { \
    if (!collecting()) fatal("stopping after a bad %s buffer", who); \
    return ncclInvalidArgument; } } while (0)

/* Reduces count elements of sendbuff over the communicator into a host fp32/fp64 vector. */
static ncclResult_t reduce_all(const void *send, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, std::vector<float> &f, std::vector<double> &d) {
    if (op != ncclSum && op != ncclMax && op != ncclMin && op != ncclAvg && op != ncclProd)
        return nccl_fail(ncclInvalidArgument, "unknown reduction");
    if (t == ncclFloat64) { d.assign((const double *)send, (const double *)send + count); }
    else if (nccl_float(t)) { f.resize(count); to_f32(f.data(), send, nccl_cuda(t), count); }
    else return nccl_fail(ncclInvalidArgument, "emulated reductions take fp16, bf16, fp32, fp64");
#ifdef MG_USE_MPI
    if (comm->size > 1) {
        MPI_Op mop = op == ncclMax ? MPI_MAX : op == ncclMin ? MPI_MIN : op == ncclProd ? MPI_PROD : MPI_SUM;
        if (t == ncclFloat64) MPI_Allreduce(MPI_IN_PLACE, d.data(), (int)count, MPI_DOUBLE, mop, comm->mpi);
        else MPI_Allreduce(MPI_IN_PLACE, f.data(), (int)count, MPI_FLOAT, mop, comm->mpi);
    }
#endif
    if (op == ncclAvg) {
        for (float &v : f) v /= (float)comm->size;
        for (double &v : d) v /= (double)comm->size;
    }
    return ncclSuccess;
}
static void store_reduced(void *dst, const std::vector<float> &f, const std::vector<double> &d,
                          size_t first, size_t count, ncclDataType_t t) {
    if (t == ncclFloat64) memcpy(dst, d.data() + first, count * 8);
    else from_f32(dst, f.data() + first, nccl_cuda(t), count);
    dev_mark(dst, count * nccl_size(t));
}
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    std::vector<float> f;
    std::vector<double> d;
    NCCL_BUF("ncclAllReduce send", send, count * nccl_size(t));
    NCCL_BUF("ncclAllReduce recv", recv, count * nccl_size(t));
    ncclResult_t r = reduce_all(send, count, t, op, comm, f, d);
    if (r == ncclSuccess) store_reduced(recv, f, d, 0, count, t);
    return r;
}
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
    std::vector<float> f;
    std::vector<double> d;
    NCCL_BUF("ncclReduceScatter send", send, recvcount * (size_t)comm->size * nccl_size(t));
    NCCL_BUF("ncclReduceScatter recv", recv, recvcount * nccl_size(t));
    ncclResult_t r = reduce_all(send, recvcount * (size_t)comm->size, t, op, comm, f, d);
    if (r == ncclSuccess) store_reduced(recv, f, d, recvcount * (size_t)comm->rank, recvcount, t);
    return r;
}
ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t) {
    size_t bytes = sendcount * nccl_size(t);
    NCCL_BUF("ncclAllGather send", send, bytes);
    NCCL_BUF("ncclAllGather recv", recv, bytes * (size_t)comm->size);
    std::vector<char> mine((const char *)send, (const char *)send + bytes);
#ifdef MG_USE_MPI
    if (comm->size > 1) {
        MPI_Allgather(mine.data(), (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->mpi);
        dev_mark(recv, bytes * (size_t)comm->size);
        return ncclSuccess;
    }
#endif
    memcpy(recv, mine.data(), bytes);
    dev_mark(recv, bytes);
    return ncclSuccess;
}
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t) {
    size_t bytes = count * nccl_size(t);
    if (comm->rank == root) NCCL_BUF("ncclBroadcast send", send, bytes);
    NCCL_BUF("ncclBroadcast recv", recv, bytes);
    if (comm->rank == root && send != recv) memmove(recv, send, bytes);
#ifdef MG_USE_MPI
    if (comm->size > 1) MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, comm->mpi);
#endif
    dev_mark(recv, bytes);
    return ncclSuccess;
}

/* Point-to-point: queued until the group ends (or at once outside a group), then every receive
   and send of the group is posted before any is waited for.                                 */
struct P2P { int send; void *buf; size_t bytes; int peer; ncclComm_t comm; };
static std::vector<P2P> g_p2p;
static int g_group_depth;
static ncclResult_t p2p_flush(void) {
#ifdef MG_USE_MPI
    std::vector<MPI_Request> reqs;
    for (int pass = 0; pass < 2; pass++)
        for (const P2P &p : g_p2p) {
            if (p.send != pass) continue;   /* receives first */
            if (p.comm->size == 1 || p.peer == p.comm->rank)
                return nccl_fail(ncclInvalidUsage, "emulated send/recv to oneself");
            reqs.push_back(MPI_REQUEST_NULL);
            if (p.send) MPI_Isend(p.buf, (int)p.bytes, MPI_BYTE, p.peer, 77, p.comm->mpi, &reqs.back());
            else MPI_Irecv(p.buf, (int)p.bytes, MPI_BYTE, p.peer, 77, p.comm->mpi, &reqs.back());
        }
    if (!reqs.empty()) MPI_Waitall((int)reqs.size(), reqs.data(), MPI_STATUSES_IGNORE);
    for (const P2P &p : g_p2p) if (!p.send) dev_mark(p.buf, p.bytes);
    g_p2p.clear();
    return ncclSuccess;
#else
    if (!g_p2p.empty()) { g_p2p.clear(); return nccl_fail(ncclInvalidUsage, "send/recv needs MPI"); }
    return ncclSuccess;
#endif
}
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
    NCCL_BUF("ncclSend", send, count * nccl_size(t));
    g_p2p.push_back({1, (void *)send, count * nccl_size(t), peer, comm});
    return g_group_depth ? ncclSuccess : p2p_flush();
}
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t) {
    NCCL_BUF("ncclRecv", recv, count * nccl_size(t));
    g_p2p.push_back({0, recv, count * nccl_size(t), peer, comm});
    return g_group_depth ? ncclSuccess : p2p_flush();
}
ncclResult_t ncclGroupStart(void) { g_group_depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth == 0) return nccl_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    return --g_group_depth ? ncclSuccess : p2p_flush();
}
