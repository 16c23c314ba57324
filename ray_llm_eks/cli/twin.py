"""``ray-llm-eks twin``: the configuration's serving app on this machine (the CPU twin, or with
``--gpu`` the image's stack on one NVIDIA GPU), then the deployment gate."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Annotated

import typer

from .common import ConfigOption, ExitCode, fail


def twin(
    config_path: ConfigOption = None,
    gpu: Annotated[bool, typer.Option("--gpu", help="The GPU profile: the image's serving stack (vLLM 0.26.0 CUDA, "
                                                    "NIXL 1.3.1, Ray 2.58.0) on this machine's one NVIDIA GPU, then "
                                                    "vLLM's own KV pool of the configured model (docs/twin.md).")] = False,
    wheels: Annotated[Path | None, typer.Option("--wheels", help="With --gpu: install the stack offline from this "
                                                                 "folder of wheels (pip download -d DIR).")] = None,
    prepared: Annotated[Path | None, typer.Option("--prepared", help="With --gpu: renders `python -m "
                                                                     "ray_llm_eks.twin.gpu prepare` made on another "
                                                                     "machine (skips rendering here).")] = None,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where the run's files go; default .twin/run "
                                                                   "(CPU) or .twin/gpu.")] = None,
    topology: Annotated[str, typer.Option("--topology", help="disaggregated, colocated or both.")] = "both",
    keep_libfabric: Annotated[bool, typer.Option("--keep-libfabric", help="With --gpu: run LIBFABRIC as rendered "
                                                                          "even where it must register GPU memory "
                                                                          "over tcp (to show that failure).")] = False,
) -> None:
    """Run the configuration's serving app on this machine, then the deployment gate (docs/twin.md).

    Without --gpu: the CPU twin (vLLM's CPU build in network namespaces; `make twin-install` first).
    With --gpu: the GPU profile on one NVIDIA GPU, a tiny random-weight model of the configured kind,
    every rendered value it changes printed; then vLLM's KV pool of the configured model's shape.

    Exit codes: 0 every gate passed (with --gpu: or failed only for a change the profile lists);
    1 a gate failed; 2 an option that cannot be used or a twin that could not start.
    """
    problems = []
    if topology not in ("disaggregated", "colocated", "both"):
        problems.append(f"--topology: not a topology (got {topology!r}); accepted: disaggregated, colocated, both")
    for flag, value in (("--wheels", wheels), ("--prepared", prepared), ("--keep-libfabric", keep_libfabric or None)):
        if value is not None and not gpu:
            problems.append(f"{flag}: only with --gpu (got {value}); accepted: add --gpu, or leave {flag} out")
    if config_path is not None and not config_path.is_file():
        problems.append(f"--config: no such file (got {str(config_path)!r}); accepted: a deployment YAML")
    if prepared is not None and not (prepared / "prepared.json").is_file():
        problems.append(f"--prepared: no prepared.json in {str(prepared)!r}; accepted: the --out folder of "
                        "`python -m ray_llm_eks.twin.gpu prepare`")
    if gpu:
        from ..twin import gpu as gpu_twin

        if wheels is not None:
            problems.append(gpu_twin.wheel_folder_problem(wheels) or "")
        problems.append(gpu_twin.gpu_problem() or "")
    problems = [p for p in problems if p]
    if problems:
        fail(ExitCode.CONFIG_ERROR, "\n".join(problems), False)
    topologies = ("disaggregated", "colocated") if topology == "both" else (topology,)
    if not gpu:
        from ..twin.__main__ import main as cpu_twin

        argv = ["--topology", topology] + (["--config", str(config_path)] if config_path else [])
        raise typer.Exit(cpu_twin(argv + (["--workdir", str(workdir)] if workdir else [])))
    from ..twin.cluster import TwinError

    try:
        code = gpu_twin.twin_gpu(config_path, workdir or Path(".twin") / "gpu", wheels=wheels, prepared=prepared,
                                 keep_libfabric=keep_libfabric, topologies=topologies)
    except (TwinError, subprocess.CalledProcessError) as error:
        fail(ExitCode.CONFIG_ERROR, f"twin --gpu: {error}", False)
    raise typer.Exit(code)
