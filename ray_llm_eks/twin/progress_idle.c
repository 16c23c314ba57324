/* LD_PRELOAD for the twin's Ray nodes: NIXL's LIBFABRIC progress thread runs in SCHED_IDLE.
 *
 * NIXL 1.3.1's Python API starts every agent with a progress thread and pthrDelay 0
 * (nixl v1.3.1 src/api/python/_api.py:213), and the LIBFABRIC engine's thread sleeps that long
 * only when a pass found no completion (libfabric_backend.cpp:1707-1727): it polls the rails'
 * completion queues without pause, and with the tcp provider each poll is an epoll_wait with a
 * timeout of 0. On a GPU node that costs one of its many cores per engine. On the twin, whose two
 * cores run two engines, three Ray nodes, the gate and the bench, the two idle engines' threads
 * took both cores (measured: 0 idle jiffies in 60 s with no request in flight, 94 % and 82 % CPU
 * for the two vLLM workers, half of it system time), and every other process ran on what was
 * left. In SCHED_IDLE the thread still polls whenever a core has nothing else to run, so the
 * transfers complete as before; it no longer takes a core from the engines and the programs the
 * tests measure.
 *
 * Only that thread: pthread_create is wrapped, and a thread is changed when libstdc++ starts it
 * for a std::thread whose callable is nixlLibfabricEngine::progressThread (the plugin exports the
 * symbol and the std::thread state's vtable; dladdr names both). Every other thread, in every
 * process, starts as it would.
 * Built by `make twin` with the system C compiler.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define PROGRESS_THREAD "_ZN19nixlLibfabricEngine14progressThreadEv"

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

struct idle_start {
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

static void *start_idle(void *data) {
    struct idle_start run = *(struct idle_start *)data;
    free(data);
    struct sched_param param = {.sched_priority = 0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &param);
    return run.start(run.arg);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    static create_fn real;
    if (!real) real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    if (is_progress_thread(start, arg)) {
        struct idle_start *run = malloc(sizeof *run);
        if (run) {
            run->start = start;
            run->arg = arg;
            int status = real(thread, attr, start_idle, run);
            if (status != 0) free(run);
            return status;
        }
    }
    return real(thread, attr, start, arg);
}
