/* Every opcode between two RC QPs with every byte and every atomic result checked, in one
 * process or split over two on one simulated fabric; and the two compared. C against Debian's
 * verbs.h, linked -libverbs, run with LD_LIBRARY_PATH at the drop-in (docs/MULTIPROCESS.md,
 * "Data integrity").
 *
 *   datacheck [--procs 1|2] [--ops N] [--window W] [--mix all|split-read] [--error-at K]
 *             [--outcomes FILE] [--quiet]
 *   datacheck --differential [the options above] [--plant-difference]
 *
 * A workload is drawn from the seed (VERBSIM_SEED, default 1): N operations, each SEND,
 * SEND_WITH_IMM, SEND_WITH_INV, RDMA WRITE, WRITE_WITH_IMM, RDMA READ, fetch-and-add or
 * compare-and-swap (matching or not), 1 byte to 9 MTUs (MTU 1024), inline where it fits the
 * QP's max_inline_data, 1 to 3 SGEs on either side, W in flight at once. A requester posts
 * them on one QP; a responder has every receive posted before the first, its memory patterned
 * and a type 2 window bound for each SEND_WITH_INV. Checked:
 *   requester: every WR completes exactly once, in order, SUCCESS, with its opcode; a READ's
 *     every byte is the responder's pattern at its offset; a fetched value is the word's value
 *     before the operation (each atomic has a word of its own among 64, so the value is known
 *     whatever is in flight);
 *   responder: every receive completes exactly once, in order, with the opcode, byte_len,
 *     immediate, IBV_WC_WITH_INV and invalidated_rkey of its message, and every byte of it
 *     (a WRITE_WITH_IMM's bytes in the write area when its completion is polled); at the end
 *     every byte of the write area (each WRITE has a region of its own), the atomic words and
 *     the READ area unchanged.
 * --mix split-read: the shape of a bug found with UCX: per message, a READ of the first 1,008
 * bytes of a 256 KiB region and a READ of the rest, both in flight.
 * --error-at K: operation K is a WRITE through an rkey the responder does not have: it
 * completes with REM_ACCESS_ERR, every WR posted after it with WR_FLUSH_ERR, and every receive
 * not consumed with WR_FLUSH_ERR (the requester posts nothing more once it sees the error).
 * --random-error: one seed in four has such an operation, at a place drawn from the seed.
 *
 * --procs 1: requester and responder are two QPs of one process (one simulated world).
 * --procs 2: they are two processes on one fabric: the program forks a responder and a
 * requester before either touches verbs, each joining VERBSIM_FABRIC (a name of its own when
 * unset); they exchange QP numbers, addresses and keys through pipes.
 * --deadline S: a run still going after S seconds of wall time fails ("no progress").
 * --guard-pages: an inaccessible page on each side of every registered region.
 * --outcomes FILE: writes each WR's outcome (status, opcode, byte_len, immediate, flags and a
 * digest of the bytes it moved) and digests of the responder's memory at the end.
 * --differential: runs the workload both ways (each in processes of its own) and passes when
 * both pass and their outcome files are identical. --plant-difference makes the two-process
 * requester misreport one byte_len, to show that the comparison fails.
 *
 * VERBSIM_FAULTS (drop, duplicate, reorder, delay, link_down ...) and VERBSIM_PROFILE are read
 * by the drop-in in every process. Exit status 0 and "PASS" when every check passed. */
#define _DEFAULT_SOURCE  // setenv, mkstemp
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../dropin/check.h"
#include "../dropin/rc.h"

enum {
  kMaxOps = 2000,
  kMaxWindow = 32,
  kWords = 64,           // atomic words; an atomic uses the next, round robin
  kReadArea = 256 << 10, // the responder's READ source
  kCanary = 16,          // bytes after each receive buffer that must stay untouched
  kMaxInv = 64,          // SEND_WITH_INV operations (each a window bound in advance)
  kRdAtomic = 4,         // READs and atomics in flight (max_rd_atomic)
};

enum op_kind {
  OP_SEND, OP_SEND_IMM, OP_SEND_INV, OP_WRITE, OP_WRITE_IMM, OP_READ, OP_FADD, OP_CAS_MATCH,
  OP_CAS_MISS, OP_BAD_WRITE, OP_KINDS
};
static const char *const kOpNames[OP_KINDS] = {"SEND", "SEND_WITH_IMM", "SEND_WITH_INV",
                                               "WRITE", "WRITE_WITH_IMM", "READ", "FETCH_ADD",
                                               "CMP_SWAP", "CMP_SWAP_MISS", "BAD_WRITE"};

struct op {
  enum op_kind kind;
  uint32_t length;
  uint8_t sges;          // requester's SGEs (1..3)
  uint8_t recv_sges;     // responder's receive SGEs (1..2), receive-consuming ops
  uint8_t inlined;
  uint32_t offset;       // READ: in the READ area; WRITE: in the write area
  uint32_t word;         // atomics: which word
  uint32_t recv;         // receive-consuming ops: which receive (in posting order)
  uint32_t inv;          // SEND_WITH_INV: which window
  uint32_t recv_at;      // receive-consuming ops: offset of the receive buffer in the pool
  uint32_t imm;
};

struct workload {
  struct op ops[kMaxOps];
  int n;
  int window;
  uint32_t recvs;        // receive-consuming operations
  uint32_t invs;         // SEND_WITH_INV operations
  size_t write_bytes;    // the write area
  size_t recv_bytes;     // the receive pool
  size_t piece;          // a requester slot holds up to 3 SGE pieces this far apart
  int error_at;          // -1: none
};

static uint64_t g_seed = 1;
static int g_quiet = 0;
static int g_plant = 0;
// The workload's parameters (each role draws the same workload from them: make_workload).
static int g_ops = 300, g_window = 8, g_error_at = -1;
static const char *g_mix = "all";

/* ---- deterministic random numbers (the workload must be the same in every process) */
static uint64_t rng_state;
static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static uint32_t below(uint32_t n) { return (uint32_t)(next_u64() % n); }

/* Byte `i` of operation `n`'s message: differs per operation, so bytes of another message
 * (or of an earlier run of the same one) are told apart. */
static uint8_t msg_byte(int n, size_t i) {
  return (uint8_t)((uint32_t)n * 131u + (uint32_t)i * 7u + (uint32_t)(i >> 8) * 13u +
                   (uint32_t)g_seed);
}
static uint8_t read_byte(size_t i) { return (uint8_t)(i * 11u + (i >> 10) + 3u); }
static uint64_t word_start(uint32_t w) { return 1000u + (uint64_t)w * 1000003u; }

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static const uint32_t kLengths[] = {1,    2,    3,    7,    8,    63,   64,   200, 255,
                                    1000, 1023, 1024, 1025, 2048, 3000, 4096, 5000, 9216};

static void make_workload(struct workload *w, int ops, int window, const char *mix,
                          int error_at, uint32_t max_inline) {
  memset(w, 0, sizeof *w);
  rng_state = g_seed * 0x2545f4914f6cdd1dull + 17;
  w->window = window;
  w->error_at = error_at;
  uint32_t next_word = 0;
  for (int n = 0; n < ops; ++n) {
    struct op *o = &w->ops[n];
    if (strcmp(mix, "split-read") == 0) {
      o->kind = OP_READ;
      o->offset = n % 2 == 0 ? 0 : 1008;
      o->length = n % 2 == 0 ? 1008 : kReadArea - 1008;
      o->sges = 1;
    } else {
      o->kind = (enum op_kind)below(OP_BAD_WRITE);
      if (o->kind == OP_SEND_INV && w->invs == kMaxInv) o->kind = OP_SEND;
      o->length = kLengths[below(sizeof kLengths / sizeof kLengths[0])];
      o->sges = (uint8_t)(1 + below(3));
      if (o->length < o->sges) o->sges = (uint8_t)o->length;
    }
    if (n == error_at) o->kind = OP_BAD_WRITE;
    o->imm = (uint32_t)next_u64();
    switch (o->kind) {
      case OP_FADD:
      case OP_CAS_MATCH:
      case OP_CAS_MISS:
        o->length = 8;
        o->sges = 1;
        o->word = next_word++ % kWords;
        break;
      case OP_READ:
        if (strcmp(mix, "split-read") != 0) o->offset = below(kReadArea - o->length + 1);
        break;
      case OP_WRITE:
      case OP_WRITE_IMM:
      case OP_BAD_WRITE:
        o->offset = (uint32_t)w->write_bytes;
        w->write_bytes += o->length;
        break;
      default:
        break;
    }
    const int takes_recv = o->kind == OP_SEND || o->kind == OP_SEND_IMM ||
                           o->kind == OP_SEND_INV || o->kind == OP_WRITE_IMM;
    if (takes_recv) {
      o->recv = w->recvs++;
      o->recv_sges = (uint8_t)(o->length >= 2 ? 1 + below(2) : 1);
      o->recv_at = (uint32_t)w->recv_bytes;
      w->recv_bytes += o->length + kCanary;
    }
    if (o->kind == OP_SEND_INV) o->inv = w->invs++;
    const int data_out = o->kind == OP_SEND || o->kind == OP_SEND_IMM ||
                         o->kind == OP_SEND_INV || o->kind == OP_WRITE ||
                         o->kind == OP_WRITE_IMM;
    o->inlined = data_out && o->length <= max_inline && below(2) == 0;
  }
  w->n = ops;
  for (int n = 0; n < ops; ++n) {
    const size_t part = w->ops[n].length / w->ops[n].sges + w->ops[n].length % w->ops[n].sges;
    if (part + 64 > w->piece) w->piece = part + 64;
  }
  if (w->write_bytes == 0) w->write_bytes = 8;
  if (w->recv_bytes == 0) w->recv_bytes = 8;
}

/* ---- outcomes */
static FILE *g_out;
static void outcome(const char *fmt, ...) {
  if (g_out == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(g_out, fmt, ap);
  va_end(ap);
}

/* ---- memory: --guard-pages puts an inaccessible page on each side of every region the
 * program registers, so that a write the simulator makes outside registered memory kills the
 * process (SIGSEGV) instead of passing unseen. */
static int g_guard_pages = 0;
static uint8_t *alloc_memory(size_t bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t span = (bytes + page - 1) / page * page;
  if (!g_guard_pages) {
    void *p = NULL;
    CHECK(posix_memalign(&p, page, span) == 0, "posix_memalign");
    return p;
  }
  uint8_t *all = mmap(NULL, span + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(all != MAP_FAILED, "mmap: %s", strerror(errno));
  CHECK(mprotect(all + page, span, PROT_READ | PROT_WRITE) == 0, "mprotect: %s",
        strerror(errno));
  return all + page;
}
static void free_memory(uint8_t *p, size_t bytes) {
  if (!g_guard_pages) {
    free(p);
    return;
  }
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  munmap(p - page, (bytes + page - 1) / page * page + 2 * page);
}

/* ---- the two sides' verbs objects */
struct side {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;     // requester: slots + words' results; responder: everything
  uint8_t *mem;
  size_t mem_bytes;
};

struct endpoint {
  uint32_t qpn;
  union ibv_gid gid;
  uint64_t read_area, write_area, words;  // responder
  uint32_t rkey;
  uint32_t inv_keys[kMaxInv];
};

static struct ibv_qp *make_qp(struct side *s, uint32_t send_wr, uint32_t recv_wr) {
  struct ibv_qp_init_attr_ex init = {
      .send_cq = s->cq,
      .recv_cq = s->cq,
      .cap = {.max_send_wr = send_wr, .max_recv_wr = recv_wr, .max_send_sge = 3,
              .max_recv_sge = 2, .max_inline_data = 64},
      .qp_type = IBV_QPT_RC,
      .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
      .pd = s->pd,
      .send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                        IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW,
  };
  struct ibv_qp *qp = ibv_create_qp_ex(s->ctx, &init);
  CHECK(qp, "ibv_create_qp_ex: %s", strerror(errno));
  return qp;
}

/* Opens the device and a PD, and draws the workload (which depends on the QP's
 * max_inline_data, which the profile sets: a QP is asked) if `w` has none yet. */
static void open_side(struct side *s, struct workload *w) {
  s->ctx = first_device();
  s->pd = ibv_alloc_pd(s->ctx);
  CHECK(s->pd, "ibv_alloc_pd");
  if (w->n != 0) return;
  s->cq = ibv_create_cq(s->ctx, 4, NULL, NULL, 0);
  CHECK(s->cq, "ibv_create_cq");
  struct ibv_qp *qp = make_qp(s, 4, 1);
  struct ibv_qp_attr attr;
  struct ibv_qp_init_attr init;
  CHECK(ibv_query_qp(qp, &attr, IBV_QP_CAP, &init) == 0, "ibv_query_qp");
  CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(s->cq) == 0, "destroy the probe QP");
  s->cq = NULL;
  make_workload(w, g_ops, g_window, g_mix, g_error_at, attr.cap.max_inline_data);
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote, const union ibv_gid *gid) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS) == 0, "modify to INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote;
  a.max_dest_rd_atomic = kRdAtomic;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.grh.dgid = *gid;
  a.ah_attr.grh.sgid_index = 1;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER) == 0, "modify to RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = kRdAtomic;
  CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC) == 0, "modify to RTS");
}

/* ---- the responder: memory, receives, windows; what it checks */
struct responder {
  struct side s;
  const struct workload *w;
  uint8_t *read_area, *write_area, *words, *recv_pool;
  struct ibv_mw *mws[kMaxInv];
  uint32_t inv_keys[kMaxInv];
  uint32_t next_recv;    // receives completed
  uint32_t flushed;      // of them with WR_FLUSH_ERR
  int error_seen;
  int binds_left;
};

static void open_side(struct side *s, struct workload *w);

static void responder_setup(struct responder *r, struct workload *w) {
  memset(r, 0, sizeof *r);
  r->w = w;
  struct side *s = &r->s;
  open_side(s, w);
  const size_t words_at = kReadArea;
  const size_t write_at = words_at + kWords * 8;
  const size_t recv_at = write_at + w->write_bytes;
  s->mem_bytes = recv_at + w->recv_bytes;
  s->mem = alloc_memory(s->mem_bytes);
  r->read_area = s->mem;
  r->words = s->mem + words_at;
  r->write_area = s->mem + write_at;
  r->recv_pool = s->mem + recv_at;
  for (size_t i = 0; i < kReadArea; ++i) r->read_area[i] = read_byte(i);
  for (uint32_t k = 0; k < kWords; ++k) {
    const uint64_t v = word_start(k);
    memcpy(r->words + 8 * k, &v, 8);
  }
  memset(r->write_area, 0xa5, w->write_bytes);
  memset(r->recv_pool, 0x5a, w->recv_bytes);
  s->mr = ibv_reg_mr(s->pd, s->mem, s->mem_bytes,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
  CHECK(s->mr, "responder ibv_reg_mr: %s", strerror(errno));
  s->cq = ibv_create_cq(s->ctx, (int)(w->recvs + w->invs + 16), NULL, NULL, 0);
  CHECK(s->cq, "responder ibv_create_cq: %s", strerror(errno));
  s->qp = make_qp(s, w->invs + 4, w->recvs + 1);
}

/* Every receive, in the order the messages consume them, before the first message. */
static void responder_post_receives(struct responder *r) {
  const struct workload *w = r->w;
  for (int n = 0; n < w->n; ++n) {
    const struct op *o = &w->ops[n];
    if (o->recv_sges == 0) continue;
    uint8_t *buf = r->recv_pool + o->recv_at;
    struct ibv_sge sge[2];
    const uint32_t first = o->recv_sges == 2 ? o->length / 2 : o->length;
    sge[0] = (struct ibv_sge){(uintptr_t)buf, first, r->s.mr->lkey};
    sge[1] = (struct ibv_sge){(uintptr_t)(buf + first), o->length - first, r->s.mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = o->recv, .sg_list = sge, .num_sge = o->recv_sges};
    struct ibv_recv_wr *bad = NULL;
    const int err = ibv_post_recv(r->s.qp, &wr, &bad);
    CHECK(err == 0, "ibv_post_recv of receive %u: %s", o->recv, strerror(err));
  }
}

/* A type 2 window over the write area for each SEND_WITH_INV, bound through the QP. */
static void responder_bind_windows(struct responder *r) {
  for (uint32_t i = 0; i < r->w->invs; ++i) {
    r->mws[i] = ibv_alloc_mw(r->s.pd, IBV_MW_TYPE_2);
    CHECK(r->mws[i], "ibv_alloc_mw(type 2): %s", strerror(errno));
    const uint32_t key = ibv_inc_rkey(r->mws[i]->rkey);
    struct ibv_send_wr wr = {.wr_id = 0xb000 + i, .opcode = IBV_WR_BIND_MW,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.bind_mw.mw = r->mws[i];
    wr.bind_mw.rkey = key;
    wr.bind_mw.bind_info.mr = r->s.mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)r->write_area;
    wr.bind_mw.bind_info.length = 8;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    struct ibv_send_wr *bad = NULL;
    const int err = ibv_post_send(r->s.qp, &wr, &bad);
    CHECK(err == 0, "IBV_WR_BIND_MW %u: %s", i, strerror(err));
    r->mws[i]->rkey = key;
    r->inv_keys[i] = key;
    ++r->binds_left;
  }
}

/* The operation that consumed receive `recv`. */
static const struct op *op_of_recv(const struct workload *w, uint32_t recv, int *n) {
  for (int k = 0; k < w->n; ++k) {
    if (w->ops[k].recv_sges != 0 && w->ops[k].recv == recv) {
      *n = k;
      return &w->ops[k];
    }
  }
  return NULL;
}

/* Takes the responder's completions; true once every receive and bind has completed. */
static int responder_poll(struct responder *r) {
  struct ibv_wc wcs[16];
  const int got = ibv_poll_cq(r->s.cq, 16, wcs);
  CHECK(got >= 0, "responder ibv_poll_cq: %d", got);
  for (int i = 0; i < got; ++i) {
    const struct ibv_wc *wc = &wcs[i];
    if (wc->wr_id >= 0xb000 && wc->wr_id < 0xb000 + kMaxInv && wc->opcode == IBV_WC_BIND_MW) {
      CHECK(wc->status == IBV_WC_SUCCESS, "bind %llu: %s", (unsigned long long)wc->wr_id,
            ibv_wc_status_str(wc->status));
      --r->binds_left;
      continue;
    }
    CHECK(wc->wr_id == r->next_recv,
          "receive completions out of order or repeated: got receive %llu, want %u",
          (unsigned long long)wc->wr_id, r->next_recv);
    int n = -1;
    const struct op *o = op_of_recv(r->w, r->next_recv, &n);
    CHECK(o, "receive %u consumed by no operation", r->next_recv);
    ++r->next_recv;
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
      CHECK(r->w->error_at >= 0 && n > r->w->error_at,
            "receive %u (operation %d, %s) flushed", r->next_recv - 1, n, kOpNames[o->kind]);
      ++r->flushed;
      outcome("recv %u flushed\n", r->next_recv - 1);
      continue;
    }
    CHECK(!r->flushed, "receive %u completed after a flushed one", r->next_recv - 1);
    CHECK(wc->status == IBV_WC_SUCCESS, "receive %u (operation %d, %s): %s", r->next_recv - 1,
          n, kOpNames[o->kind], ibv_wc_status_str(wc->status));
    CHECK(r->w->error_at < 0 || n < r->w->error_at,
          "receive %u (operation %d) succeeded after the error", r->next_recv - 1, n);
    const int imm = o->kind == OP_SEND_IMM || o->kind == OP_WRITE_IMM;
    const enum ibv_wc_opcode want_op =
        o->kind == OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    CHECK(wc->opcode == want_op, "receive of operation %d (%s): opcode %d, want %d", n,
          kOpNames[o->kind], wc->opcode, want_op);
    CHECK(wc->byte_len == o->length, "receive of operation %d (%s): byte_len %u, want %u", n,
          kOpNames[o->kind], wc->byte_len, o->length);
    CHECK(!!(wc->wc_flags & IBV_WC_WITH_IMM) == imm, "operation %d (%s): wc_flags %#x", n,
          kOpNames[o->kind], wc->wc_flags);
    if (imm) {
      CHECK(ntohl(wc->imm_data) == o->imm, "operation %d (%s): immediate %#x, want %#x", n,
            kOpNames[o->kind], ntohl(wc->imm_data), o->imm);
    }
    if (o->kind == OP_SEND_INV) {
      CHECK(wc->wc_flags & IBV_WC_WITH_INV, "operation %d (SEND_WITH_INV): no IBV_WC_WITH_INV",
            n);
      CHECK(wc->invalidated_rkey == r->inv_keys[o->inv],
            "operation %d (SEND_WITH_INV): invalidated_rkey %#x, want %#x", n,
            wc->invalidated_rkey, r->inv_keys[o->inv]);
    }
    const uint8_t *got_bytes =
        o->kind == OP_WRITE_IMM ? r->write_area + o->offset : r->recv_pool + o->recv_at;
    for (uint32_t b = 0; b < o->length; ++b) {
      CHECK(got_bytes[b] == msg_byte(n, b),
            "operation %d (%s, %u bytes): byte %u is 0x%02x, want 0x%02x", n,
            kOpNames[o->kind], o->length, b, got_bytes[b], msg_byte(n, b));
    }
    if (o->kind != OP_WRITE_IMM) {
      for (uint32_t b = 0; b < kCanary; ++b) {
        CHECK(got_bytes[o->length + b] == 0x5a,
              "operation %d (%s, %u bytes): byte %u past the message was written", n,
              kOpNames[o->kind], o->length, o->length + b);
      }
    }
    outcome("recv %u op %d status %d opcode %d byte_len %u imm %#x flags %#x data %016llx\n",
            r->next_recv - 1, n, wc->status, wc->opcode, wc->byte_len,
            imm ? ntohl(wc->imm_data) : 0, wc->wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV),
            (unsigned long long)fnv(0xcbf29ce484222325ull, got_bytes, o->length));
  }
  return r->next_recv == r->w->recvs && r->binds_left == 0;
}

/* At the end: every byte of the write area, the words as the requester counted them, the
 * READ area untouched. */
static void responder_final(struct responder *r, const uint64_t *words) {
  const struct workload *w = r->w;
  for (int n = 0; n < w->n; ++n) {
    const struct op *o = &w->ops[n];
    if (o->kind != OP_WRITE && o->kind != OP_WRITE_IMM && o->kind != OP_BAD_WRITE) continue;
    // A WRITE after the error never runs (the responder went to ERR at the error).
    const int executed = o->kind != OP_BAD_WRITE && (w->error_at < 0 || n < w->error_at);
    for (uint32_t b = 0; b < o->length; ++b) {
      const uint8_t want = executed ? msg_byte(n, b) : 0xa5;
      const uint8_t got = r->write_area[o->offset + b];
      CHECK(got == want, "write area: operation %d (%s, %u bytes) byte %u is 0x%02x, want 0x%02x",
            n, kOpNames[o->kind], o->length, b, got, want);
    }
  }
  for (uint32_t k = 0; k < kWords; ++k) {
    uint64_t v;
    memcpy(&v, r->words + 8 * k, 8);
    CHECK(v == words[k], "atomic word %u is %llu, the requester counted %llu", k,
          (unsigned long long)v, (unsigned long long)words[k]);
  }
  for (size_t i = 0; i < kReadArea; ++i) {
    CHECK(r->read_area[i] == read_byte(i), "READ area byte %zu changed", i);
  }
  outcome("write_area %016llx\nwords %016llx\n",
          (unsigned long long)fnv(0xcbf29ce484222325ull, r->write_area, w->write_bytes),
          (unsigned long long)fnv(0xcbf29ce484222325ull, r->words, kWords * 8));
}

static void side_teardown(struct side *s) {
  CHECK(ibv_destroy_cq(s->cq) == 0, "ibv_destroy_cq");
  const int err = ibv_dereg_mr(s->mr);
  CHECK(err == 0, "ibv_dereg_mr: %s", strerror(err));
}

static void responder_teardown(struct responder *r) {
  CHECK(ibv_destroy_qp(r->s.qp) == 0, "ibv_destroy_qp");
  // Windows still bound (a SEND_WITH_INV after an error never ran) go before their MR.
  for (uint32_t i = 0; i < r->w->invs; ++i) CHECK(ibv_dealloc_mw(r->mws[i]) == 0, "dealloc_mw");
  side_teardown(&r->s);
  CHECK(ibv_dealloc_pd(r->s.pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(r->s.ctx) == 0, "ibv_close_device");
  free_memory(r->s.mem, r->s.mem_bytes);
}

/* ---- the requester */
struct requester {
  struct side s;
  const struct workload *w;
  struct endpoint peer;
  uint64_t words[kWords];  // the model: each word's value once every posted atomic ran
  uint64_t ran[kWords];    // each word's value after the atomics the responder runs: all, or
                           // those before an --error-at (it goes to ERR there)
  uint64_t before[kMaxOps];  // an atomic's expected fetched value
  uint64_t after[kMaxOps];   // and the word's value after it
  uint8_t done[kMaxOps];
  int posted, completed, first_error;
  int stop_posting;
};

static uint8_t *slot_of(struct requester *q, int n) {
  return q->s.mem + (size_t)(n % q->w->window) * 3 * q->w->piece;
}

static void requester_setup(struct requester *q, struct workload *w) {
  memset(q, 0, sizeof *q);
  q->w = w;
  q->first_error = -1;
  struct side *s = &q->s;
  open_side(s, w);
  s->mem_bytes = (size_t)w->window * 3 * w->piece;
  s->mem = alloc_memory(s->mem_bytes);
  memset(s->mem, 0, s->mem_bytes);
  s->mr = ibv_reg_mr(s->pd, s->mem, s->mem_bytes, IBV_ACCESS_LOCAL_WRITE);
  CHECK(s->mr, "requester ibv_reg_mr: %s", strerror(errno));
  s->cq = ibv_create_cq(s->ctx, w->window + 8, NULL, NULL, 0);
  CHECK(s->cq, "requester ibv_create_cq: %s", strerror(errno));
  s->qp = make_qp(s, (uint32_t)w->window, 1);
  for (uint32_t k = 0; k < kWords; ++k) q->words[k] = q->ran[k] = word_start(k);
}

/* The local SGEs of operation `n`: its length cut into o->sges pieces, kPiece apart. */
static int local_sges(struct requester *q, int n, struct ibv_sge *sge) {
  const struct op *o = &q->w->ops[n];
  uint8_t *slot = slot_of(q, n);
  uint32_t left = o->length;
  for (int k = 0; k < o->sges; ++k) {
    const uint32_t part = k + 1 == o->sges ? left : o->length / o->sges;
    sge[k] = (struct ibv_sge){(uintptr_t)(slot + (size_t)k * q->w->piece), part, q->s.mr->lkey};
    left -= part;
  }
  return o->sges;
}

static void requester_post(struct requester *q) {
  const int n = q->posted;
  const struct op *o = &q->w->ops[n];
  struct ibv_sge sge[3];
  const int nsge = local_sges(q, n, sge);
  const int data_out = o->kind == OP_SEND || o->kind == OP_SEND_IMM || o->kind == OP_SEND_INV ||
                       o->kind == OP_WRITE || o->kind == OP_WRITE_IMM || o->kind == OP_BAD_WRITE;
  // The message's bytes into the SGEs (a READ's and an atomic's destination: a poison the
  // response must overwrite).
  uint32_t at = 0;
  for (int k = 0; k < nsge; ++k) {
    uint8_t *p = (uint8_t *)(uintptr_t)sge[k].addr;
    for (uint32_t b = 0; b < sge[k].length; ++b, ++at) p[b] = data_out ? msg_byte(n, at) : 0xee;
  }
  struct ibv_send_wr wr = {.wr_id = (uint64_t)n, .sg_list = sge, .num_sge = nsge,
                           .send_flags = IBV_SEND_SIGNALED};
  if (o->inlined) wr.send_flags |= IBV_SEND_INLINE;
  wr.imm_data = htonl(o->imm);
  switch (o->kind) {
    case OP_SEND: wr.opcode = IBV_WR_SEND; break;
    case OP_SEND_IMM: wr.opcode = IBV_WR_SEND_WITH_IMM; break;
    case OP_SEND_INV:
      wr.opcode = IBV_WR_SEND_WITH_INV;
      wr.invalidate_rkey = q->peer.inv_keys[o->inv];
      break;
    case OP_WRITE:
    case OP_WRITE_IMM:
    case OP_BAD_WRITE:
      wr.opcode = o->kind == OP_WRITE_IMM ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = q->peer.write_area + o->offset;
      wr.wr.rdma.rkey = o->kind == OP_BAD_WRITE ? q->peer.rkey ^ 0x5a5a00u : q->peer.rkey;
      break;
    case OP_READ:
      wr.opcode = IBV_WR_RDMA_READ;
      wr.wr.rdma.remote_addr = q->peer.read_area + o->offset;
      wr.wr.rdma.rkey = q->peer.rkey;
      break;
    case OP_FADD:
    case OP_CAS_MATCH:
    case OP_CAS_MISS: {
      const uint64_t v = q->words[o->word];
      q->before[n] = v;
      wr.wr.atomic.remote_addr = q->peer.words + 8u * o->word;
      wr.wr.atomic.rkey = q->peer.rkey;
      if (o->kind == OP_FADD) {
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.compare_add = 1 + (uint64_t)n;
        q->words[o->word] = v + 1 + (uint64_t)n;
      } else {
        wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.compare_add = o->kind == OP_CAS_MATCH ? v : v + 77;
        wr.wr.atomic.swap = v * 3 + 1;
        if (o->kind == OP_CAS_MATCH) q->words[o->word] = v * 3 + 1;
      }
      q->after[n] = q->words[o->word];
      if (q->w->error_at < 0 || n < q->w->error_at) q->ran[o->word] = q->after[n];
      break;
    }
    default: CHECK(0, "operation kind %d", o->kind);
  }
  struct ibv_send_wr *bad = NULL;
  const int err = ibv_post_send(q->s.qp, &wr, &bad);
  CHECK(err == 0, "ibv_post_send of operation %d (%s, %u bytes, %d SGEs%s): %s", n,
        kOpNames[o->kind], o->length, nsge, o->inlined ? ", inline" : "", strerror(err));
  ++q->posted;
}

static enum ibv_wc_opcode wc_opcode_of(enum op_kind k) {
  switch (k) {
    case OP_WRITE:
    case OP_WRITE_IMM:
    case OP_BAD_WRITE: return IBV_WC_RDMA_WRITE;
    case OP_READ: return IBV_WC_RDMA_READ;
    case OP_FADD: return IBV_WC_FETCH_ADD;
    case OP_CAS_MATCH:
    case OP_CAS_MISS: return IBV_WC_COMP_SWAP;
    default: return IBV_WC_SEND;
  }
}

static void requester_completion(struct requester *q, const struct ibv_wc *wc) {
  const int n = (int)wc->wr_id;
  CHECK(wc->wr_id < (uint64_t)q->posted, "completion of wr_id %llu, never posted",
        (unsigned long long)wc->wr_id);
  CHECK(!q->done[n], "operation %d completed twice", n);
  CHECK(n == q->completed, "operation %d completed before operation %d", n, q->completed);
  q->done[n] = 1;
  ++q->completed;
  const struct op *o = &q->w->ops[n];
  const int error_at = q->w->error_at;
  if (error_at >= 0 && (q->first_error >= 0 || wc->status != IBV_WC_SUCCESS)) {
    // The bad WRITE is NAKed (REM_ACCESS_ERR) and the responder goes to ERR, having run
    // everything before it. A response lost on the way changes which WR fails, as on a real
    // fabric: the NAK's (the responder answers no retry: RETRY_EXC_ERR), or a READ's or
    // atomic's in flight before it (the requester sends again from it: RETRY_EXC_ERR there,
    // the bad WRITE flushed). Everything after the first failure is flushed.
    if (q->first_error >= 0) {
      CHECK(wc->status == IBV_WC_WR_FLUSH_ERR, "operation %d (%s) after the error: %s", n,
            kOpNames[o->kind], ibv_wc_status_str(wc->status));
      return;
    }
    const int rem_access = wc->status == IBV_WC_REM_ACCESS_ERR && n == error_at;
    const int retries = wc->status == IBV_WC_RETRY_EXC_ERR && n <= error_at &&
                        n > error_at - q->w->window;
    CHECK(rem_access || retries, "operation %d (%s): %s (the bad WRITE is operation %d)", n,
          kOpNames[o->kind], ibv_wc_status_str(wc->status), error_at);
    q->first_error = n;
    q->stop_posting = 1;
    // Which WR it is depends on the packets a fault plan drew: not an outcome to compare.
    outcome("op error: REM_ACCESS_ERR or RETRY_EXC_ERR in the last %d operations to %d\n",
            q->w->window, error_at);
    return;
  }
  CHECK(wc->status == IBV_WC_SUCCESS, "operation %d (%s, %u bytes, %d SGEs%s): %s", n,
        kOpNames[o->kind], o->length, o->sges, o->inlined ? ", inline" : "",
        ibv_wc_status_str(wc->status));
  CHECK(wc->opcode == wc_opcode_of(o->kind), "operation %d (%s): opcode %d, want %d", n,
        kOpNames[o->kind], wc->opcode, wc_opcode_of(o->kind));
  struct ibv_sge sge[3];
  const int nsge = local_sges(q, n, sge);
  uint64_t digest = 0xcbf29ce484222325ull;
  uint32_t at = 0;
  for (int k = 0; k < nsge; ++k) {
    const uint8_t *p = (const uint8_t *)(uintptr_t)sge[k].addr;
    digest = fnv(digest, p, sge[k].length);
    if (o->kind == OP_READ) {
      for (uint32_t b = 0; b < sge[k].length; ++b, ++at) {
        CHECK(p[b] == read_byte(o->offset + at),
              "READ %d (%u bytes at %u, %d SGEs): byte %u is 0x%02x, want 0x%02x", n,
              o->length, o->offset, nsge, at, p[b], read_byte(o->offset + at));
      }
    }
  }
  if (o->kind == OP_FADD || o->kind == OP_CAS_MATCH || o->kind == OP_CAS_MISS) {
    uint64_t fetched;
    memcpy(&fetched, (const void *)(uintptr_t)sge[0].addr, 8);
    CHECK(fetched == q->before[n], "%s %d (word %u): fetched %llu, want %llu",
          kOpNames[o->kind], n, o->word, (unsigned long long)fetched,
          (unsigned long long)q->before[n]);
  }
  uint32_t byte_len = wc->byte_len;
  if (g_plant && n == q->w->n / 2) ++byte_len;  // --plant-difference: a misreport
  // Near an error a WR may end either way (above): outcomes from there are not compared.
  if (error_at >= 0 && n > error_at - q->w->window) return;
  outcome("op %d %s status %d opcode %d byte_len %u data %016llx\n", n, kOpNames[o->kind],
          wc->status, wc->opcode, byte_len, (unsigned long long)digest);
}

/* Posts while the window allows, takes completions; calls `idle` (the responder's turn in one
 * process) between. True when every posted WR has completed and nothing is left to post. */
static int requester_step(struct requester *q) {
  while (!q->stop_posting && q->posted < q->w->n && q->posted - q->completed < q->w->window) {
    requester_post(q);
  }
  struct ibv_wc wcs[16];
  const int got = ibv_poll_cq(q->s.cq, 16, wcs);
  CHECK(got >= 0, "requester ibv_poll_cq: %d", got);
  for (int i = 0; i < got; ++i) requester_completion(q, &wcs[i]);
  return q->completed == q->posted && (q->stop_posting || q->posted == q->w->n);
}

static void requester_teardown(struct requester *q) {
  CHECK(ibv_destroy_qp(q->s.qp) == 0, "ibv_destroy_qp");
  side_teardown(&q->s);
  CHECK(ibv_dealloc_pd(q->s.pd) == 0, "ibv_dealloc_pd");
  CHECK(ibv_close_device(q->s.ctx) == 0, "ibv_close_device");
  free_memory(q->s.mem, q->s.mem_bytes);
}

static void self_endpoint(struct side *s, struct endpoint *e) {
  memset(e, 0, sizeof *e);
  e->qpn = s->qp->qp_num;
  CHECK(ibv_query_gid(s->ctx, 1, 1, &e->gid) == 0, "ibv_query_gid");
}

static void responder_endpoint(struct responder *r, struct endpoint *e) {
  self_endpoint(&r->s, e);
  e->read_area = (uintptr_t)r->read_area;
  e->write_area = (uintptr_t)r->write_area;
  e->words = (uintptr_t)r->words;
  e->rkey = r->s.mr->rkey;
  memcpy(e->inv_keys, r->inv_keys, sizeof e->inv_keys);
}

static const long kSpins = 400000000L;  // a run that stops making progress ends, failing

/* --deadline: a run still going after this many seconds of wall time ends, failing. */
static double g_deadline = 0;
static struct timespec g_started;
static int past_deadline(void) {
  if (g_deadline <= 0) return 0;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - g_started.tv_sec) + (double)(now.tv_nsec - g_started.tv_nsec) / 1e9 >
         g_deadline;
}

/* Exactly one completion per WR: once every WR has completed, `cq` (of `whose` side) stays
 * empty while the world runs on a while (polls of `also`'s CQ too: one process). */
static void no_more(struct ibv_cq *cq, const char *whose, struct side *also) {
  struct ibv_wc wc;
  for (int i = 0; i < 20000; ++i) {
    const int got = ibv_poll_cq(cq, 1, &wc);
    CHECK(got == 0, "%s CQ: a completion after every WR completed: wr_id %llu, %s", whose,
          (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
    if (also != NULL) CHECK(ibv_poll_cq(also->cq, 1, &wc) == 0, "a completion too many");
  }
}

static void summary(const struct requester *q, const struct responder *r, const char *how) {
  if (g_quiet) return;
  int counts[OP_KINDS] = {0};
  for (int n = 0; n < q->posted; ++n) ++counts[q->w->ops[n].kind];
  printf("%s: %d operations posted, %d completed (", how, q->posted, q->completed);
  const char *sep = "";
  for (int k = 0; k < OP_KINDS; ++k) {
    if (counts[k] == 0) continue;
    printf("%s%s %d", sep, kOpNames[k], counts[k]);
    sep = ", ";
  }
  printf(")");
  if (r != NULL) printf("; %u receives completed, %u flushed", r->next_recv, r->flushed);
  printf("\n");
}

/* ---- one process */
static int run_one_process(struct workload *w) {
  static struct responder r;
  static struct requester q;
  responder_setup(&r, w);
  requester_setup(&q, w);
  struct endpoint re, qe;
  self_endpoint(&q.s, &qe);
  connect_qp(r.s.qp, qe.qpn, &qe.gid);
  responder_bind_windows(&r);
  responder_post_receives(&r);
  long spins = 0;
  while (r.binds_left != 0) {
    responder_poll(&r);
    CHECK(++spins < kSpins && (spins % 4096 || !past_deadline()),
          "the windows' binds do not complete");
  }
  responder_endpoint(&r, &re);
  q.peer = re;
  connect_qp(q.s.qp, re.qpn, &re.gid);
  int q_done = 0, r_done = r.next_recv == w->recvs;
  for (spins = 0; !(q_done && r_done); ++spins) {
    CHECK(spins < kSpins && (spins % 4096 || !past_deadline()),
          "no progress: %d of %d operations completed, %u of %u receives",
          q.completed, q.posted, r.next_recv, w->recvs);
    if (!q_done) q_done = requester_step(&q);
    if (!r_done) r_done = responder_poll(&r);
  }
  no_more(q.s.cq, "the requester's", &r.s);
  no_more(r.s.cq, "the responder's", NULL);
  responder_final(&r, q.ran);
  summary(&q, &r, "one process");
  requester_teardown(&q);
  responder_teardown(&r);
  return 0;
}

/* ---- two processes */
static void put(int fd, const void *p, size_t n) {
  CHECK(write(fd, p, n) == (ssize_t)n, "write to the pipe: %s", strerror(errno));
}
static void get(int fd, void *p, size_t n) {
  size_t have = 0;
  while (have < n) {
    const ssize_t k = read(fd, (char *)p + have, n - have);
    CHECK(k > 0, "read from the pipe: the other process is gone");
    have += (size_t)k;
  }
}

static int responder_process(struct workload *w, int to_req, int from_req) {
  static struct responder r;
  responder_setup(&r, w);
  struct endpoint peer, self;
  get(from_req, &peer, sizeof peer);
  connect_qp(r.s.qp, peer.qpn, &peer.gid);
  responder_bind_windows(&r);  // in RTS: a bind is a WR of the send queue
  responder_post_receives(&r);
  long spins = 0;
  while (r.binds_left != 0) {
    responder_poll(&r);
    CHECK(++spins < kSpins && (spins % 4096 || !past_deadline()),
          "the windows' binds do not complete");
  }
  responder_endpoint(&r, &self);
  put(to_req, &self, sizeof self);
  for (spins = 0; !responder_poll(&r); ++spins) {
    CHECK(spins < kSpins && (spins % 4096 || !past_deadline()),
          "no progress: %u of %u receives completed", r.next_recv, w->recvs);
  }
  uint64_t words[kWords];
  get(from_req, words, sizeof words);  // the requester is done (the world runs meanwhile)
  no_more(r.s.cq, "the responder's", NULL);
  responder_final(&r, words);
  if (!g_quiet) printf("responder: %u receives completed, %u flushed\n", r.next_recv, r.flushed);
  responder_teardown(&r);
  return 0;
}

static int requester_process(struct workload *w, int to_resp, int from_resp) {
  static struct requester q;
  requester_setup(&q, w);
  struct endpoint self;
  self_endpoint(&q.s, &self);
  put(to_resp, &self, sizeof self);
  get(from_resp, &q.peer, sizeof q.peer);
  connect_qp(q.s.qp, q.peer.qpn, &q.peer.gid);
  for (long spins = 0; !requester_step(&q); ++spins) {
    CHECK(spins < kSpins && (spins % 4096 || !past_deadline()),
          "no progress: %d of %d operations completed", q.completed, q.posted);
  }
  no_more(q.s.cq, "the requester's", NULL);
  summary(&q, NULL, "two processes, requester");
  put(to_resp, q.ran, sizeof q.ran);
  requester_teardown(&q);
  return 0;
}

static int exited_zero(pid_t pid, const char *who) {
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
  fprintf(stderr, "FAIL: the %s %s %d\n", who, WIFEXITED(status) ? "exited" : "was killed by",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return 0;
}

/* Opens `path` for this process's outcomes ("" or NULL: none). */
static void open_outcomes(const char *path) {
  if (path == NULL || *path == '\0') return;
  g_out = fopen(path, "w");
  CHECK(g_out, "%s: %s", path, strerror(errno));
}

static void close_outcomes(void) {
  if (g_out != NULL) CHECK(fclose(g_out) == 0, "writing the outcomes: %s", strerror(errno));
  g_out = NULL;
}

static int run_two_processes(struct workload *w, const char *outcomes) {
  char name[64];
  if (getenv("VERBSIM_FABRIC") == NULL) {
    snprintf(name, sizeof name, "datacheck-%d", (int)getpid());
    setenv("VERBSIM_FABRIC", name, 1);
  }
  char req_out[512] = "", resp_out[512] = "";
  if (outcomes != NULL && *outcomes != '\0') {
    snprintf(req_out, sizeof req_out, "%s.requester", outcomes);
    snprintf(resp_out, sizeof resp_out, "%s.responder", outcomes);
  }
  int to_req[2], to_resp[2];
  CHECK(pipe(to_req) == 0 && pipe(to_resp) == 0, "pipe");
  fflush(stdout);
  const pid_t resp = fork();
  CHECK(resp >= 0, "fork: %s", strerror(errno));
  if (resp == 0) {
    close(to_req[0]);
    close(to_resp[1]);
    open_outcomes(resp_out);
    const int rc = responder_process(w, to_req[1], to_resp[0]);
    close_outcomes();
    fflush(stdout);
    exit(rc);
  }
  const pid_t req = fork();
  CHECK(req >= 0, "fork: %s", strerror(errno));
  if (req == 0) {
    close(to_resp[0]);
    close(to_req[1]);
    open_outcomes(req_out);
    const int rc = requester_process(w, to_resp[1], to_req[0]);
    close_outcomes();
    fflush(stdout);
    exit(rc);
  }
  close(to_req[0]);
  close(to_req[1]);
  close(to_resp[0]);
  close(to_resp[1]);
  const int ok_req = exited_zero(req, "requester");
  const int ok_resp = exited_zero(resp, "responder");
  CHECK(ok_req && ok_resp, "a process failed");
  char path[160];
  snprintf(path, sizeof path, "/dev/shm/verbsim-fabric-%d-%s", (int)getuid(),
           getenv("VERBSIM_FABRIC"));
  CHECK(access(path, F_OK) != 0, "the fabric's file %s is left", path);
  if (req_out[0] != '\0') {
    // One file, as one process writes it: the requester's outcomes, then the responder's.
    FILE *out = fopen(outcomes, "w");
    CHECK(out, "%s: %s", outcomes, strerror(errno));
    const char *parts[2] = {req_out, resp_out};
    for (int i = 0; i < 2; ++i) {
      FILE *in = fopen(parts[i], "r");
      CHECK(in, "%s: %s", parts[i], strerror(errno));
      char line[512];
      while (fgets(line, sizeof line, in) != NULL) fputs(line, out);
      fclose(in);
      unlink(parts[i]);
    }
    CHECK(fclose(out) == 0, "writing %s", outcomes);
  }
  return 0;
}

/* The outcomes in one process are written the same way: the requester's, then the
 * responder's. */
static int run_one_process_outcomes(struct workload *w, const char *outcomes) {
  if (outcomes == NULL || *outcomes == '\0') return run_one_process(w);
  char req_out[512], resp_out[512];
  snprintf(req_out, sizeof req_out, "%s.requester", outcomes);
  snprintf(resp_out, sizeof resp_out, "%s.responder", outcomes);
  // The two roles share one loop: split their lines by prefix afterwards.
  open_outcomes(outcomes);
  run_one_process(w);
  close_outcomes();
  FILE *in = fopen(outcomes, "r");
  CHECK(in, "%s", outcomes);
  FILE *a = fopen(req_out, "w"), *b = fopen(resp_out, "w");
  CHECK(a && b, "%s", req_out);
  char line[512];
  while (fgets(line, sizeof line, in) != NULL) fputs(line, strncmp(line, "op ", 3) == 0 ? a : b);
  fclose(in);
  fclose(a);
  fclose(b);
  FILE *out = fopen(outcomes, "w");
  CHECK(out, "%s", outcomes);
  const char *parts[2] = {req_out, resp_out};
  for (int i = 0; i < 2; ++i) {
    FILE *part = fopen(parts[i], "r");
    CHECK(part, "%s", parts[i]);
    while (fgets(line, sizeof line, part) != NULL) fputs(line, out);
    fclose(part);
    unlink(parts[i]);
  }
  CHECK(fclose(out) == 0, "writing %s", outcomes);
  return 0;
}

/* Runs this program again as a child, with `procs`, writing `outcomes`; its exit status. */
static int run_child(char **argv, int argc, const char *procs, const char *outcomes,
                     int plant) {
  char *args[64];
  int k = 0;
  args[k++] = argv[0];
  for (int i = 1; i < argc && k < 56; ++i) {
    if (strcmp(argv[i], "--differential") == 0 || strcmp(argv[i], "--plant-difference") == 0) {
      continue;
    }
    if (strcmp(argv[i], "--procs") == 0 || strcmp(argv[i], "--outcomes") == 0) {
      ++i;
      continue;
    }
    args[k++] = argv[i];
  }
  args[k++] = (char *)"--procs";
  args[k++] = (char *)procs;
  args[k++] = (char *)"--outcomes";
  args[k++] = (char *)outcomes;
  if (plant) args[k++] = (char *)"--plant-difference";
  args[k] = NULL;
  fflush(stdout);
  const pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    // Its PASS lines are not the comparison's: only a failure (stderr) is shown.
    if (freopen("/dev/null", "w", stdout) == NULL) _exit(127);
    execv("/proc/self/exe", args);
    fprintf(stderr, "FAIL: exec: %s\n", strerror(errno));
    _exit(127);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int differential(char **argv, int argc) {
  char one[] = "/tmp/datacheck-one-XXXXXX", two[] = "/tmp/datacheck-two-XXXXXX";
  const int fd1 = mkstemp(one), fd2 = mkstemp(two);
  CHECK(fd1 >= 0 && fd2 >= 0, "mkstemp: %s", strerror(errno));
  close(fd1);
  close(fd2);
  const int rc1 = run_child(argv, argc, "1", one, 0);
  const int rc2 = run_child(argv, argc, "2", two, g_plant);
  int same = rc1 == 0 && rc2 == 0;
  if (same) {
    FILE *a = fopen(one, "r"), *b = fopen(two, "r");
    CHECK(a && b, "the outcome files");
    char la[512], lb[512];
    long line = 0;
    for (;;) {
      char *ga = fgets(la, sizeof la, a), *gb = fgets(lb, sizeof lb, b);
      ++line;
      if (ga == NULL && gb == NULL) break;
      if (ga == NULL || gb == NULL || strcmp(la, lb) != 0) {
        printf("FAIL: one process and two processes differ at outcome %ld:\n  one: %s  two: %s",
               line, ga ? la : "(end)\n", gb ? lb : "(end)\n");
        same = 0;
        break;
      }
    }
    fclose(a);
    fclose(b);
    if (same) printf("differential: %ld outcomes, the same in one process and two\n", line - 1);
  } else {
    printf("FAIL: one process exited %d, two processes %d\n", rc1, rc2);
  }
  unlink(one);
  unlink(two);
  if (!same) {
    printf("FAIL: seed %llu\n", (unsigned long long)g_seed);
    return 1;
  }
  printf("PASS\n");
  return 0;
}

static void usage(const char *why) {
  fprintf(stderr,
          "datacheck: %s\n"
          "usage: datacheck [--procs 1|2] [--ops N] [--window W] [--mix all|split-read]\n"
          "                 [--error-at K | --random-error] [--outcomes FILE] [--quiet]\n"
          "                 [--deadline SECONDS] [--guard-pages]\n"
          "       datacheck --differential [the options above] [--plant-difference]\n",
          why);
  exit(2);
}

int main(int argc, char **argv) {
  int procs = 1, ops = 300, window = 8, error_at = -1, diff = 0, random_error = 0;
  const char *mix = "all";
  const char *outcomes = NULL;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--procs") == 0 && v) {
      procs = atoi(v), ++i;
    } else if (strcmp(a, "--ops") == 0 && v) {
      ops = atoi(v), ++i;
    } else if (strcmp(a, "--window") == 0 && v) {
      window = atoi(v), ++i;
    } else if (strcmp(a, "--mix") == 0 && v) {
      mix = v, ++i;
    } else if (strcmp(a, "--error-at") == 0 && v) {
      error_at = atoi(v), ++i;
    } else if (strcmp(a, "--outcomes") == 0 && v) {
      outcomes = v, ++i;
    } else if (strcmp(a, "--deadline") == 0 && v) {
      g_deadline = atof(v), ++i;
    } else if (strcmp(a, "--guard-pages") == 0) {
      g_guard_pages = 1;
    } else if (strcmp(a, "--random-error") == 0) {
      random_error = 1;
    } else if (strcmp(a, "--differential") == 0) {
      diff = 1;
    } else if (strcmp(a, "--plant-difference") == 0) {
      g_plant = 1;
    } else if (strcmp(a, "--quiet") == 0) {
      g_quiet = 1;
    } else if (strcmp(a, "--help") == 0) {
      usage("every opcode, every byte checked");
    } else {
      usage("unknown argument");
    }
  }
  if (procs != 1 && procs != 2) usage("--procs is 1 or 2");
  if (ops < 1 || ops > kMaxOps) usage("--ops is 1..2000");
  if (window < 1 || window > kMaxWindow) usage("--window is 1..32");
  if (strcmp(mix, "all") != 0 && strcmp(mix, "split-read") != 0) usage("--mix is all or split-read");
  if (error_at >= ops) usage("--error-at is below --ops");
  clock_gettime(CLOCK_MONOTONIC, &g_started);
  // A side whose peer process is gone gets EPIPE from the pipe (a clear FAIL), not SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  const char *seed = getenv("VERBSIM_SEED");
  if (seed != NULL && *seed != '\0') g_seed = strtoull(seed, NULL, 0);
  if (random_error && g_seed % 4 == 0) error_at = (int)((g_seed / 4 * 7919) % (uint64_t)ops);
  if (diff) return differential(argv, argc);

  g_ops = ops;
  g_window = window;
  g_mix = mix;
  g_error_at = error_at;
  static struct workload w;  // drawn by each role once it has a device (open_side)
  if (procs == 1) {
    run_one_process_outcomes(&w, outcomes);
  } else {
    run_two_processes(&w, outcomes);
  }
  printf("PASS\n");
  return 0;
}
