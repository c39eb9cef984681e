/* CUPTI's buffer callbacks, in C, so that CUPTI never waits for Python's GIL.
 *
 * CUPTI calls the "buffer completed" callback on its own thread while it holds its own locks. A
 * callback written in Python (ctypes, cupti-python) must take the GIL first. If the program's
 * thread holds the GIL and, at the same moment, waits in the driver for one of those CUPTI locks
 * (cuModuleLoad from torch.compile's kernel loader does both), neither can go on: the program
 * hangs. These callbacks only take a mutex of their own for a few instructions: a completed
 * buffer is queued, and gpuscope's Python side takes it from the queue when it flushes
 * (gs_pop / gs_release, called through ctypes with the GIL released).
 *
 * Buffers are zeroed before CUPTI gets them (the reader relies on it: bytes CUPTI skipped read as
 * record kind 0). Compiled by gpuscope on first use (capture/cupti/native.py); no Python headers.
 *
 * The second part is the callback API's one subscriber (gs_api_callback) and launch anchors
 * (gs_anchor, launch_anchors.py). An anchor is one driver call whose correlation id marks a range
 * boundary among the program's launches; through a Python callback it cost about 3 µs. Here the
 * subscriber keeps the anchor call's id in a thread-local variable without Python, gs_anchor
 * reads the clock, makes the call and appends (time, thread, id) to a list that the flush thread
 * takes (gs_anchors_take). Calls registered as timed in C (gs_set_timed: CUDA graph launches,
 * which need no Python stack) are timed here too, entry to exit, and kept as (start, end, thread,
 * callback id, correlation id) until the flush thread takes them (gs_timed_take): a program that
 * launches graphs from a thread of its own (XLA) never waits for the GIL at a launch. Every other
 * watched call is forwarded to gpuscope's Python handler.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <string.h>

#define QUEUE_CAP 4096 /* completed buffers waiting for gpuscope */
#define POOL_CAP 256   /* zeroed buffers kept for reuse */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static size_t buffer_size = 8u << 20;
static uint8_t *queue_buf[QUEUE_CAP];
static size_t queue_valid[QUEUE_CAP];
static size_t head, tail, queued;
static uint8_t *pool[POOL_CAP];
static size_t pooled;
static uint64_t allocated, dropped_buffers, failed_allocations;

void gs_set_buffer_size(size_t n) {
    pthread_mutex_lock(&mu);
    buffer_size = n;
    pthread_mutex_unlock(&mu);
}

/* CUpti_BuffersCallbackRequestFunc */
void gs_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    uint8_t *b = NULL;
    size_t n;
    pthread_mutex_lock(&mu);
    n = buffer_size;
    if (pooled) b = pool[--pooled];
    pthread_mutex_unlock(&mu);
    if (!b) {
        b = (uint8_t *)calloc(1, n); /* zeroed; malloc alignment (16) is more than CUPTI's 8 */
        pthread_mutex_lock(&mu);
        if (b) allocated++; else failed_allocations++;
        pthread_mutex_unlock(&mu);
    }
    *buffer = b;
    *size = b ? n : 0;
    *max_records = 0;
}

static void give_back(uint8_t *b, size_t used) {
    memset(b, 0, used);
    pthread_mutex_lock(&mu);
    if (pooled < POOL_CAP) {
        pool[pooled++] = b;
        b = NULL;
    } else {
        allocated--;
    }
    pthread_mutex_unlock(&mu);
    free(b); /* free(NULL) does nothing */
}

/* CUpti_BuffersCallbackCompleteFunc */
void gs_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)context;
    (void)stream;
    (void)size;
    if (!buffer) return;
    if (!valid) {
        give_back(buffer, 0);
        return;
    }
    pthread_mutex_lock(&mu);
    if (queued < QUEUE_CAP) {
        queue_buf[tail] = buffer;
        queue_valid[tail] = valid;
        tail = (tail + 1) % QUEUE_CAP;
        queued++;
        buffer = NULL;
    } else {
        dropped_buffers++;
    }
    pthread_mutex_unlock(&mu);
    if (buffer) give_back(buffer, valid);
}

/* The oldest completed buffer and its valid bytes; 0 when none is queued. */
int gs_pop(uint8_t **buffer, size_t *valid) {
    int got = 0;
    pthread_mutex_lock(&mu);
    if (queued) {
        *buffer = queue_buf[head];
        *valid = queue_valid[head];
        head = (head + 1) % QUEUE_CAP;
        queued--;
        got = 1;
    }
    pthread_mutex_unlock(&mu);
    return got;
}

/* A buffer gpuscope has read: zeroed and kept for CUPTI's next request. */
void gs_release(uint8_t *buffer, size_t valid) {
    if (buffer) give_back(buffer, valid);
}

uint64_t gs_allocated(void) { return allocated; }
uint64_t gs_dropped_buffers(void) { return dropped_buffers; }
uint64_t gs_failed_allocations(void) { return failed_allocations; }
size_t gs_queued(void) { return queued; }

/* ---- the callback API's subscriber and launch anchors ------------------------------------- */

/* CUpti_CallbackData's leading fields (cupti_callbacks.h), for the driver and runtime domains. */
typedef struct {
    int32_t site; /* CUPTI_API_ENTER 0, CUPTI_API_EXIT 1 */
    const char *function_name;
    const void *params;
    void *return_value;
    const char *symbol_name;
    void *context;
    uint32_t context_uid;
    uint64_t *correlation_data;
    uint32_t correlation_id;
} gs_callback_data;

typedef void (*gs_forward_fn)(uint32_t domain, uint32_t cbid, int32_t site, uint32_t correlation_id);
typedef int (*gs_version_fn)(int *);

static gs_forward_fn forward_to;
static uint32_t anchor_domain, anchor_cbid = UINT32_MAX;
static gs_version_fn anchor_fn;
static __thread uint32_t anchor_id;
static __thread int64_t thread_id;

/* Rows of int64 values kept in C until the flush thread takes them (anchors, timed calls). */
typedef struct {
    pthread_mutex_t mu;
    int64_t *rows;
    size_t n, cap; /* rows held, room for */
    size_t width; /* values per row */
    uint64_t lost; /* rows not kept: no memory */
} gs_rows;

static void rows_append(gs_rows *r, const int64_t *values) {
    pthread_mutex_lock(&r->mu);
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        int64_t *grown = realloc(r->rows, cap * r->width * sizeof(int64_t));
        if (!grown) {
            r->lost++;
            pthread_mutex_unlock(&r->mu);
            return;
        }
        r->rows = grown;
        r->cap = cap;
    }
    memcpy(r->rows + r->width * r->n++, values, r->width * sizeof(int64_t));
    pthread_mutex_unlock(&r->mu);
}

static size_t rows_pending(gs_rows *r) {
    pthread_mutex_lock(&r->mu);
    size_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* Copy up to max rows into out, oldest first, and forget them. */
static size_t rows_take(gs_rows *r, int64_t *out, size_t max) {
    pthread_mutex_lock(&r->mu);
    size_t n = r->n < max ? r->n : max, w = r->width;
    memcpy(out, r->rows, n * w * sizeof(int64_t));
    memmove(r->rows, r->rows + w * n, (r->n - n) * w * sizeof(int64_t));
    r->n -= n;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static gs_rows anchors = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 3, 0}; /* time, thread, id */

#define TIMED_CAP 8 /* callback ids timed in C */
static uint32_t timed_domain[TIMED_CAP], timed_cbid[TIMED_CAP];
static int timed_n;
static volatile int timed_on = 1; /* 0 outside a capture window: calls pass untimed */
static __thread int64_t timed_open; /* the entry time of this thread's open timed call, 0: not timed */
static __thread int64_t timed_open_key; /* its domain << 32 | callback id, 0: none open */
static __thread uint32_t timed_open_id; /* its correlation id */
static __thread int timed_inner; /* a timed call of the other layer is open inside it */
static __thread uint32_t timed_open_gen; /* timed_gen when it opened */
static volatile uint32_t timed_gen; /* changed when callbacks are switched: calls open then are stale */
static uint64_t timed_count; /* timed calls ended since the start, timed or not (the overhead probe's pace) */
static gs_rows timed = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0, 5, 0}; /* start, end, thread, key, correlation id */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A timed call's entry or exit. A timed call of the other API layer made inside an open one on the
 * same thread (the driver call that carries out a runtime call) is not timed again: the outer call
 * is the row, with its own correlation id (the one its GPU work carries). A call of the same layer
 * while one is open, or any call after gs_timed_reset (callbacks were switched off, so an open
 * call's exit may never come), starts afresh. */
static void timed_call(uint32_t domain, uint32_t cbid, int32_t site, uint32_t correlation_id) {
    int64_t key = ((int64_t)domain << 32) | cbid;
    int open = timed_open_key != 0 && timed_open_gen == timed_gen;
    if (site == 0) {
        if (open && (uint32_t)(timed_open_key >> 32) != domain && !timed_inner) {
            timed_inner = 1;
            return;
        }
        timed_open = timed_on ? now_ns() : 0;
        timed_open_key = key;
        timed_open_id = correlation_id;
        timed_open_gen = timed_gen;
        timed_inner = 0;
        return;
    }
    if (timed_inner && open && (uint32_t)(timed_open_key >> 32) != domain) {
        timed_inner = 0;
        return;
    }
    if (!open || key != timed_open_key) return;
    __atomic_fetch_add(&timed_count, 1, __ATOMIC_RELAXED);
    int64_t start = timed_open;
    uint32_t id = timed_open_id;
    timed_open = 0;
    timed_open_key = 0;
    if (!start) return;
    if (!thread_id) thread_id = (int64_t)syscall(SYS_gettid);
    int64_t row[5] = {start, now_ns(), thread_id, key, id};
    rows_append(&timed, row);
}

/* Time the calls of this callback id in C (return 0), or say there is no room left (-1). */
int gs_set_timed(uint32_t domain, uint32_t cbid) {
    for (int i = 0; i < timed_n; i++)
        if (timed_cbid[i] == cbid && timed_domain[i] == domain) return 0;
    if (timed_n == TIMED_CAP) return -1;
    timed_domain[timed_n] = domain;
    timed_cbid[timed_n] = cbid;
    timed_n++;
    return 0;
}

/* Stop timing every callback id in C (their calls are forwarded again). */
void gs_clear_timed(void) { timed_n = 0; }

/* Forget the timed calls open on every thread (their callbacks were switched off: no exit will come). */
void gs_timed_reset(void) { timed_gen++; }

/* Time the registered calls (1) or let them pass (0). */
void gs_set_timed_on(int on) { timed_on = on; }

/* Copy up to max timed calls (five int64 each) into out, oldest first, and forget them. */
size_t gs_timed_take(int64_t *out, size_t max) { return rows_take(&timed, out, max); }

/* How many timed calls are held. */
size_t gs_timed_pending(void) { return rows_pending(&timed); }

uint64_t gs_timed_lost(void) { return timed.lost; }

/* How many timed calls have ended since the start, whether collection timed them or not. */
uint64_t gs_timed_count(void) { return __atomic_load_n(&timed_count, __ATOMIC_RELAXED); }

/* The first instantiation of a CUDA graph with nodes (graph_level.py): where that graph has at least
 * graph_min_nodes nodes, CUPTI's graph-level records are switched on before it is instantiated, so
 * that every executable graph of the process is made under one setting (graphs instantiated before
 * such a switch crashed at their next launch). Decided once, whatever the answer. Every
 * cuGraphInstantiate* parameter struct starts with (CUgraphExec *, CUgraph). */
#define GRAPH_WATCH_CAP 16
typedef int (*gs_nodes_fn)(void *graph, void *nodes, size_t *count);
typedef int (*gs_enable_fn)(int kind);
static uint32_t graph_domain, graph_cbid[GRAPH_WATCH_CAP];
static int graph_watch_n;
static gs_nodes_fn graph_nodes_fn;
static gs_enable_fn graph_enable_fn;
static int graph_kind;
static int64_t graph_min_nodes = INT64_MAX;
static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t graph_state[4] = {0, 0, -1, 0}; /* decided, switched, nodes (-1: not counted), time */

int gs_set_graph_watch(uint32_t domain, uint32_t cbid) {
    if (graph_watch_n == GRAPH_WATCH_CAP) return -1;
    graph_domain = domain;
    graph_cbid[graph_watch_n++] = cbid;
    return 0;
}

void gs_set_graph_switch(void *nodes_fn, void *enable_fn, int kind, int64_t min_nodes) {
    graph_nodes_fn = (gs_nodes_fn)nodes_fn;
    graph_enable_fn = (gs_enable_fn)enable_fn;
    graph_kind = kind;
    graph_min_nodes = min_nodes;
}

/* (decided, switched, nodes of the first graph, when) into out[4]. */
void gs_graph_state(int64_t *out) {
    pthread_mutex_lock(&graph_mu);
    memcpy(out, graph_state, sizeof graph_state);
    pthread_mutex_unlock(&graph_mu);
}

static void graph_first(const void *params) {
    pthread_mutex_lock(&graph_mu);
    if (!graph_state[0]) {
        void *graph = params ? ((void *const *)params)[1] : NULL;
        size_t n = 0;
        int counted = graph && graph_nodes_fn && graph_nodes_fn(graph, NULL, &n) == 0;
        if (!counted || n > 0) { /* an empty graph (torch instantiates one before its first real one) decides nothing */
            graph_state[0] = 1;
            graph_state[2] = counted ? (int64_t)n : -1;
            if (counted && (int64_t)n >= graph_min_nodes && graph_enable_fn && graph_enable_fn(graph_kind) == 0) {
                graph_state[1] = 1;
                graph_state[3] = now_ns();
            }
        }
    }
    pthread_mutex_unlock(&graph_mu);
}

/* CUpti_CallbackFunc: runs on the thread that made the API call. */
void gs_api_callback(void *userdata, uint32_t domain, uint32_t cbid, const void *cbdata) {
    const gs_callback_data *d = (const gs_callback_data *)cbdata;
    (void)userdata;
    if (!d) return;
    if (cbid == anchor_cbid && domain == anchor_domain) {
        if (d->site == 0) anchor_id = d->correlation_id;
        return;
    }
    for (int i = 0; i < timed_n; i++) {
        if (timed_cbid[i] == cbid && timed_domain[i] == domain) {
            timed_call(domain, cbid, d->site, d->correlation_id);
            return;
        }
    }
    if (domain == graph_domain) { /* after the anchor and timed calls: they are the frequent ones */
        for (int i = 0; i < graph_watch_n; i++) {
            if (graph_cbid[i] == cbid) {
                if (d->site == 0 && !graph_state[0]) graph_first(d->params);
                return;
            }
        }
    }
    gs_forward_fn f = forward_to;
    if (f) f(domain, cbid, d->site, d->correlation_id);
}

/* Where watched calls other than the anchor go (NULL: nowhere). */
void gs_set_forward(gs_forward_fn f) { forward_to = f; }

/* The anchor call (cuDriverGetVersion) and its callback id. */
void gs_set_anchor(uint32_t domain, uint32_t cbid, void *fn) {
    anchor_domain = domain;
    anchor_cbid = cbid;
    anchor_fn = (gs_version_fn)fn;
}

/* Make one anchor; return its correlation id (0: CUPTI gave none, and nothing is kept). */
uint32_t gs_anchor(void) {
    struct timespec ts;
    int version;
    if (!anchor_fn) return 0;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    anchor_id = 0;
    anchor_fn(&version);
    uint32_t id = anchor_id;
    if (!id) return 0;
    if (!thread_id) thread_id = (int64_t)syscall(SYS_gettid);
    int64_t row[3] = {(int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec, thread_id, id};
    rows_append(&anchors, row);
    return id;
}

/* How many anchors are held. */
size_t gs_anchors_pending(void) { return rows_pending(&anchors); }

/* Copy up to max held anchors (time, thread, id each) into out, oldest first, and forget them. */
size_t gs_anchors_take(int64_t *out, size_t max) { return rows_take(&anchors, out, max); }

/* Forget the anchors made after the first n. */
void gs_anchors_forget_since(size_t n) {
    pthread_mutex_lock(&anchors.mu);
    if (n < anchors.n) anchors.n = n;
    pthread_mutex_unlock(&anchors.mu);
}

uint64_t gs_anchors_lost(void) { return anchors.lost; }
