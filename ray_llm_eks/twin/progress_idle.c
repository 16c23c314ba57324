/* LD_PRELOAD for the twin's worker nodes: NIXL's LIBFABRIC progress thread waits for its sockets
 * for up to 1 ms when they have nothing, instead of polling them again at once.
 *
 * NIXL 1.3.1's Python API starts every agent with a progress thread and pthrDelay 0
 * (nixl v1.3.1 src/api/python/_api.py:213), and the LIBFABRIC engine's thread sleeps that long
 * only after a pass that found no completion (libfabric_backend.cpp:1707-1727): it polls the
 * rails' completion queues without pause. With the tcp provider each poll is an epoll_wait on the
 * rail's sockets with a timeout of 0. On a GPU node that costs one of its many cores per engine.
 * On the twin, whose two cores run two engines, three Ray nodes, the gate and the bench, the two
 * idle engines' threads took both cores (measured: 0 idle jiffies in 60 s with no request in
 * flight, 94 % and 82 % CPU for the two vLLM workers, half of it system time).
 *
 * In that thread only, an epoll_wait with a timeout of 0 becomes one with a timeout of 1 ms: it
 * still returns at once when a socket is ready, so a transfer in flight is progressed as before,
 * and an idle rail costs a wake-up a millisecond. (Running the thread in SCHED_IDLE instead was
 * tried and starved the transfers: each worker is pinned to one core, the bench's processes took
 * it, and the disaggregated bench's first level took 113 s instead of 50 s.)
 *
 * The thread is told apart when libstdc++ starts it: a std::thread whose callable is
 * nixlLibfabricEngine::progressThread (the plugin exports the symbol and the std::thread state's
 * vtable; dladdr names both). Every other thread, in every process, runs as it would.
 * Built by `make twin` with the system C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define PROGRESS_THREAD "_ZN19nixlLibfabricEngine14progressThreadEv"
#define IDLE_WAIT_MS 1

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);

static __thread int in_progress_thread;

struct progress_start {
    void *(*start)(void *);
    void *arg;
};

static int named(const void *address, const char *symbol) {
    Dl_info info;
    return address && dladdr(address, &info) && info.dli_sname && info.dli_saddr == address &&
           strcmp(info.dli_sname, symbol) == 0;
}

static int in_libstdcxx(const void *address) {
    Dl_info info;
    return dladdr(address, &info) && info.dli_fname && strstr(info.dli_fname, "libstdc++");
}

/* libstdc++ starts a std::thread with its (unexported) execute_native_thread_routine(_State *).
 * The state's vtable names the callable's type; for the engine's member functions (a
 * nixl_status_t (nixlLibfabricEngine::*)() and the engine) the words after it hold the member
 * function's address: progressThread's is told from the connection-manager thread's by name. */
static int is_progress_thread(void *(*start)(void *), void *arg) {
    if (!arg || !in_libstdcxx((void *)start)) return 0;
    void **state = arg;
    Dl_info vtable;
    if (!dladdr(state[0], &vtable) || !vtable.dli_sname ||
        strncmp(vtable.dli_sname, "_ZTVNSt6thread11_State_impl", 27) != 0 ||
        !strstr(vtable.dli_sname, "19nixlLibfabricEngine"))
        return 0;
    for (int i = 1; i <= 3; i++)
        if (named(state[i], PROGRESS_THREAD)) return 1;
    return 0;
}

static void *start_progress(void *data) {
    struct progress_start run = *(struct progress_start *)data;
    free(data);
    in_progress_thread = 1;
    return run.start(run.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    static create_fn real;
    if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (is_progress_thread(start, arg)) {
        struct progress_start *run = malloc(sizeof *run);
        if (run) {
            run->start = start;
            run->arg = arg;
            int status = real(thread, attr, start_progress, run);
            if (status != 0) free(run);
            return status;
        }
    }
    return real(thread, attr, start, arg);
}

int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout) {
    static epoll_wait_fn real;
    if (!real) real = (epoll_wait_fn)dlsym(RTLD_NEXT, "epoll_wait");
    return real(epfd, events, maxevents, in_progress_thread && timeout == 0 ? IDLE_WAIT_MS : timeout);
}

/* For the fast test (tests/twin_units/test_progress_idle.py): whether this thread is the one changed. */
int rle_in_progress_thread(void) { return in_progress_thread; }
