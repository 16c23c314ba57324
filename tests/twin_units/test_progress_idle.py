"""The twin's LD_PRELOAD shim (ray_llm_eks/twin/progress_idle.c) changes exactly one thread: a
std::thread running ``nixlLibfabricEngine::progressThread``, as NIXL 1.3.1's LIBFABRIC engine
starts it (``std::thread(&nixlLibfabricEngine::progressThread, this)``,
libfabric_backend.cpp:506). There an ``epoll_wait`` with a timeout of 0 waits up to 1 ms; the
engine's other member-function thread (its connection manager, the same std::thread state type),
a lambda thread, a plain pthread and the main thread are left alone.

The twin runs it on the real plugin (docs/twin.md); this runs in `make test` with the machine's C
and C++ compilers, which `make twin` already needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[2] / "ray_llm_eks" / "twin" / "progress_idle.c"
PROGRAM = r"""
#include <dlfcn.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <cstdio>
#include <thread>

// Whether the shim changed this thread, and how long five epoll_wait(..., 0) on an empty set took.
static void report(const char *name) {
    auto changed = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "rle_in_progress_thread"));
    int fd = epoll_create1(0);
    epoll_event events[4];
    timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < 5; i++) epoll_wait(fd, events, 4, 0);
    clock_gettime(CLOCK_MONOTONIC, &end);
    close(fd);
    double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
    std::printf("%s %s %.3f\n", name, changed && changed() ? "changed" : "unchanged", ms);
}

struct nixlLibfabricEngine {
    int progressThread() { report("progressThread"); return 0; }
    int cmThread() { report("cmThread"); return 0; }
};

static void *plain(void *) { report("pthread"); return nullptr; }

int main() {
    nixlLibfabricEngine engine;
    std::thread(&nixlLibfabricEngine::progressThread, &engine).join();
    std::thread(&nixlLibfabricEngine::cmThread, &engine).join();
    std::thread([] { report("lambda"); }).join();
    pthread_t thread;
    pthread_create(&thread, nullptr, plain, nullptr);
    pthread_join(thread, nullptr);
    report("main");
}
"""


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH; the twin's shims are built with the machine's compilers")
    return path


def _threads(tmp_path: Path, preload: bool) -> dict[str, tuple[str, float]]:
    shim = tmp_path / "libnixl_progress_idle.so"
    subprocess.run([_compiler("cc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(shim),
                    str(SHIM), "-ldl"], check=True)
    source = tmp_path / "engine.cpp"
    source.write_text(PROGRAM)
    program = tmp_path / "engine"
    # -rdynamic: the member functions are in the dynamic symbol table, as the plugin exports them.
    subprocess.run([_compiler("c++"), "-O0", "-rdynamic", "-pthread", "-o", str(program), str(source), "-ldl"],
                   check=True)
    env = {**os.environ, "LD_PRELOAD": str(shim)} if preload else dict(os.environ)
    result = subprocess.run([str(program)], capture_output=True, text=True, env=env, check=True, timeout=60)
    return {name: (state, float(ms)) for name, state, ms in (line.split() for line in result.stdout.splitlines())}


@pytest.mark.integration
def test_only_the_progress_thread_waits_for_its_sockets(tmp_path):
    threads = _threads(tmp_path, preload=True)
    assert {name: state for name, (state, _) in threads.items()} == {
        "progressThread": "changed", "cmThread": "unchanged", "lambda": "unchanged", "pthread": "unchanged",
        "main": "unchanged"}
    # The kernel returns from an epoll_wait with nothing ready no sooner than its timeout: 5 x 1 ms.
    assert threads["progressThread"][1] >= 5.0, threads


@pytest.mark.integration
def test_without_the_shim_no_thread_is_changed(tmp_path):
    assert {state for state, _ in _threads(tmp_path, preload=False).values()} == {"unchanged"}
