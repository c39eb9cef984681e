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
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
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
