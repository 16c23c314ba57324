"""The twin's LD_PRELOAD shim (ray_llm_eks/twin/progress_idle.c) puts exactly one thread in
SCHED_IDLE: a std::thread running ``nixlLibfabricEngine::progressThread``, as NIXL 1.3.1's
LIBFABRIC engine starts it (``std::thread(&nixlLibfabricEngine::progressThread, this)``,
libfabric_backend.cpp:506). The engine's other member-function thread (its connection manager,
same std::thread state type), a lambda thread and a plain pthread keep the normal policy.

The twin itself checks the same on the real plugin (docs/twin.md); this runs in `make test` with
the machine's C and C++ compilers, which `make twin` already needs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[1] / "ray_llm_eks" / "twin" / "progress_idle.c"
PROGRAM = r"""
#include <pthread.h>
#include <sched.h>
#include <cstdio>
#include <thread>

static const char *policy() { return sched_getscheduler(0) == SCHED_IDLE ? "idle" : "normal"; }

struct nixlLibfabricEngine {
    int progressThread() { std::printf("progressThread %s\n", policy()); return 0; }
    int cmThread() { std::printf("cmThread %s\n", policy()); return 0; }
};

static void *plain(void *) { std::printf("pthread %s\n", policy()); return nullptr; }

int main() {
    nixlLibfabricEngine engine;
    std::thread(&nixlLibfabricEngine::progressThread, &engine).join();
    std::thread(&nixlLibfabricEngine::cmThread, &engine).join();
    std::thread([] { std::printf("lambda %s\n", policy()); }).join();
    pthread_t thread;
    pthread_create(&thread, nullptr, plain, nullptr);
    pthread_join(thread, nullptr);
    std::printf("main %s\n", policy());
}
"""


def _compiler(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not on PATH; the twin's shims are built with the machine's compilers")
    return path


def _threads(tmp_path: Path, preload: bool) -> dict[str, str]:
    shim = tmp_path / "libnixl_progress_idle.so"
    subprocess.run([_compiler("cc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(shim),
                    str(SHIM), "-ldl"], check=True)
    source = tmp_path / "engine.cpp"
    source.write_text(PROGRAM)
    program = tmp_path / "engine"
    # -rdynamic: the member functions are in the dynamic symbol table, as the plugin exports them.
    subprocess.run([_compiler("c++"), "-O0", "-rdynamic", "-pthread", "-o", str(program), str(source)], check=True)
    env = {**os.environ, "LD_PRELOAD": str(shim)} if preload else dict(os.environ)
    result = subprocess.run([str(program)], capture_output=True, text=True, env=env, check=True, timeout=60)
    return dict(line.split() for line in result.stdout.splitlines())


def test_only_the_progress_thread_runs_in_sched_idle(tmp_path):
    assert _threads(tmp_path, preload=True) == {
        "progressThread": "idle", "cmThread": "normal", "lambda": "normal", "pthread": "normal", "main": "normal"}


def test_without_the_shim_every_thread_is_normal(tmp_path):
    assert set(_threads(tmp_path, preload=False).values()) == {"normal"}
