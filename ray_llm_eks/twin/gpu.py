"""``make twin-gpu`` / ``ray-llm-eks twin --gpu``: the rendered serving app on one NVIDIA GPU.

Four steps, each its own command, so the machine that renders (it needs the CDK's Node) and the
machine with the GPU can differ::

    python -m ray_llm_eks.twin.gpu prepare --config FILE --out DIR   # render both topologies (workstation)
    python -m ray_llm_eks.twin.gpu install --venv V [--wheels W]     # the image's serving stack
    python -m ray_llm_eks.twin.gpu run --prepared DIR --venv V       # P/D and colocated, greedy agreement, the gate
    python -m ray_llm_eks.twin.gpu budget --prepared DIR --venv V    # vLLM's own KV pool vs plan's

``prepare`` swaps the configured model for a tiny random-weight one of the same kind (dense:
LlamaForCausalLM; hybrid: Qwen3_5ForConditionalGeneration, :mod:`.tiny_model`) and renders the
rest as ``make synth`` does: the instance types, the KV path (``kv_buffer_device``, backends,
DS layout), the environment. ``run`` changes only what :data:`.gpu_profile.GPU_CHANGES` lists.
``budget`` loads the configured model's real architecture with dummy weights
(``load_format: dummy``) in the configured instance's GPU-memory budget and reports vLLM's own
KV pool and maximum concurrency beside ``plan``'s. The GPU machine needs Python 3.12, PyTorch
2.11 with CUDA 13 and PyYAML; everything else comes from PyPI or ``--wheels`` (docs/twin.md,
"The GPU profile", records each run).
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from ..verification import bundle
from . import cluster, gpu_profile, tiny_model, twin_profile
from .host_network import HostNetwork
from .run import TwinRun

TOPOLOGIES = ("disaggregated", "colocated")
HOSTS = ("head", "prefill", "decode")
STACK = ("vllm==0.26.0", "nixl-cu13==1.3.1", "nixl==1.3.1", "ray[serve]==2.58.0", "mpich==5.0.2")
"""The image's serving stack (serve-llm-cuda-v1.0: Ray 2.58.0, vLLM 0.26.0, NIXL 1.3.1) and
libfabric 2.x (the mpich wheel's, with the tcp provider) for NIXL's LIBFABRIC plugin."""
PROMPT = "Say hello to the twin and count to ten."
GREEDY_TOKENS = 16
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "data" / "reference.yaml"


# --- prepare (the workstation: needs the package's CDK environment) ----------------------------

def prepare(config_path: Path, out: Path) -> dict[str, Any]:
    import yaml

    from ..config import parse_config
    from ..planning import make_plan
    from . import render

    data = yaml.safe_load(config_path.read_text()) or {}
    configured = parse_config(data, str(config_path))
    plan = make_plan(configured)
    serving = configured.specs().serving
    tiny = render.tiny_config(config_path, out, runs_hybrid=True)
    kind = tiny.kind
    for topology in TOPOLOGIES:
        charts = render.render(tiny.path, topology)
        (out / f"{topology}.json").write_text(json.dumps(
            {"rayservice": charts[render.RAYSERVICE_CHART], "verification": charts[render.VERIFICATION_CHART]}))
    budgets = [{"role": b.role, "instance_type": b.instance_type, "gpu_memory_gib": b.gpu_memory_gib,
                "gpu_memory_utilization": b.gpu_memory_utilization, "weights_gib": round(b.weights_gib, 3),
                "kv_pool_gib": round(b.kv_pool_gib, 3), "max_concurrent_sequences": b.max_concurrent_sequences}
               for b in plan.budgets]
    meta = {"kind": kind, "configured_model": serving.model.source, "config": str(config_path),
            "max_model_len": serving.model.max_model_len, "plan_budgets": budgets}
    (out / "prepared.json").write_text(json.dumps(meta, indent=2))
    return meta


# --- install (the GPU machine) -----------------------------------------------------------------

def install(venv: Path, wheels: Path | None) -> None:
    """A virtualenv over the machine's own Python (its PyTorch), with the serving stack: from PyPI, or
    every wheel of ``wheels`` (a folder ``pip download`` filled: the stack and all it depends on)."""
    if not (venv / "bin" / "python").exists():
        base = getattr(sys, "_base_executable", sys.executable)  # the system's Python, not this package's venv
        subprocess.run([base, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    if wheels is not None:
        subprocess.run([*pip, "--no-index", "--no-deps", *sorted(glob.glob(str(wheels / "*.whl")))], check=True)
    else:
        subprocess.run([*pip, *STACK], check=True)


def library_path(venv: Path) -> str:
    """libfabric 2.x (``<venv>/lib/mpich``) and the folder of ``libcudart.so.13``, which NIXL's
    LIBFABRIC plugin links (PyTorch's CUDA 13 wheels bring it under ``nvidia/cu13/lib``)."""
    found = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import sys, glob; print('\\n'.join(p for s in sys.path for p in "
                            "glob.glob(s + '/nvidia/cu13/lib/libcudart.so.13*') + glob.glob(s + '/nvidia/cuda_runtime/lib/libcudart.so.13*')))"],
                           capture_output=True, text=True, check=True).stdout.split()
    folders = [str(venv / "lib" / "mpich"), *sorted({str(Path(p).parent) for p in found})]
    return ":".join(folders)


# --- run (the GPU machine) ---------------------------------------------------------------------

class GpuTwinRun(TwinRun):
    """:class:`.run.TwinRun` over prepared renders, with the GPU profile, on the host's loopback."""

    def __init__(self, workdir: Path, prepared: Path, venv: Path, model: Path, kind: str, *,
                 keep_libfabric: bool = False) -> None:
        super().__init__(workdir)
        # The gate runs with the environment's Python (TwinRun.gate), the host's here, not a twin venv's.
        self.environment = type(self.environment)(venv=venv, native=workdir, model=model)
        self.prepared, self.venv, self.model, self.kind = prepared, venv, model, kind
        self.keep_libfabric = keep_libfabric

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for topology in TOPOLOGIES:
            charts = json.loads((self.prepared / f"{topology}.json").read_text())
            self.rendered[topology] = {"serving-rayservice": charts["rayservice"],
                                       "serving-verification": charts["verification"]}
        self.network = HostNetwork(HOSTS, ray_bin=self.venv / "bin")
        self.network.down()  # a Ray left by an earlier run on this machine
        paths = twin_profile.Paths(model=str(self.model), library_path=library_path(self.venv),
                                   hf_home=str(self.workdir / "hf"), preload="")
        for topology, charts in self.rendered.items():
            self.deployments[topology] = gpu_profile.gpu_deployment(
                charts["serving-rayservice"], charts["serving-verification"], self.network.addresses, paths,
                hybrid=self.kind == "hybrid", keep_libfabric=self.keep_libfabric)
        first = self.deployments[TOPOLOGIES[0]]
        package = self.workdir / "gate-program" / bundle.IN_CLUSTER_PACKAGE
        package.mkdir(parents=True, exist_ok=True)
        for name, text in self._gate_program_files(first).items():
            (package / name).write_text(text)
        self.twin = cluster.Twin(first, self.network, self.workdir, self.venv / "bin", package.parent, log=self.log)
        self.twin.start_ray()
        for role in self.twin.worker_roles:
            self.network.forward(role, int(first.gate_settings["metrics_port"]), gpu_profile.METRICS_PORTS[role])
        self.twin.start_counter_readers(int(first.gate_settings["efa_counter_port"]))
        self._start_api(first)

    def _gate_program_files(self, deployment: twin_profile.TwinDeployment) -> dict[str, str]:
        for obj in self.rendered[deployment.topology]["serving-verification"]:
            if obj.get("kind") == "ConfigMap" and obj["metadata"]["name"].endswith("-gate-program"):
                return bundle.unpack(base64.b64decode(obj["binaryData"][bundle.ARCHIVE]))
        raise cluster.TwinError("the prepared verification chart has no gate program ConfigMap")


def chat(url: str, prompt: str, max_tokens: int = GREEDY_TOKENS) -> dict[str, Any]:
    body = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def build_model(kind: str, target: Path, python: str) -> dict[str, Any]:
    if not (target / "config.json").exists():
        subprocess.run([python, str(Path(tiny_model.__file__)), "model" if kind == "dense" else "hybrid",
                        str(target)], check=True)
    figures = target / "hybrid_architecture.json"
    return json.loads(figures.read_text()) if figures.exists() else dict(tiny_model.ARCHITECTURE)


def run(prepared: Path, venv: Path, workdir: Path, *, keep_libfabric: bool = False,
        topologies: tuple[str, ...] = TOPOLOGIES) -> dict[str, Any]:
    meta = json.loads((prepared / "prepared.json").read_text())
    kind = meta["kind"]
    model = workdir / f"model-{kind}"
    built = build_model(kind, model, str(venv / "bin" / "python"))
    rendered = tiny_model.architecture(kind)
    results: dict[str, Any] = {"kind": kind, "configured_model": meta["configured_model"], "keep_libfabric": keep_libfabric,
                               "architecture_matches_checkpoint": built == rendered, "changes": gpu_profile.GPU_CHANGES,
                               "topologies": {}}
    print("The GPU profile changes these rendered values (docs/twin.md):")
    for what, why in gpu_profile.GPU_CHANGES:
        print(f"  - {what}: {why}")
    started = time.monotonic()
    with GpuTwinRun(workdir, prepared, venv, model, kind, keep_libfabric=keep_libfabric) as twin:
        for topology in topologies:
            entry: dict[str, Any] = {"notes": twin.deployments[topology].notes}
            results["topologies"][topology] = entry
            try:
                state = twin.use(topology, timeout=600, require_running=False)
                entry["serve_status"] = state.get("status")
                if state.get("status") != "RUNNING":
                    entry["serve_message"] = str(state.get("message", ""))[:3000]
                    continue
                answer = chat(twin.openai_url, PROMPT)
                entry["greedy_text"] = answer["choices"][0]["message"]["content"]
                entry["usage"] = answer.get("usage")
                result = twin.gate(twin.settings(topology))
                entry["gate"] = {k: result.report.get(k) for k in ("verdict", "reasons", "kv", "transport")}
            except (cluster.TwinError, OSError) as error:
                entry["error"] = str(error)[:3000]
            finally:
                entry["seconds"] = round(time.monotonic() - started)
                print(f"{topology}: {json.dumps(entry)[:4000]}", flush=True)
    texts = {t: e.get("greedy_text") for t, e in results["topologies"].items()}
    if len(texts) == 2 and all(texts.values()):
        results["greedy_agreement"] = texts["disaggregated"] == texts["colocated"]
    (workdir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    return results


# --- budget (the GPU machine) ------------------------------------------------------------------

def qwen3_5_9b_config(target: Path, python: str) -> Path:
    """Qwen/Qwen3.5-9B's shape as a config.json: transformers' Qwen3_5Config defaults are that model's text
    tower (hidden 4096, 32 layers, 8 of them full attention, 16 heads, 4 KV heads of 256, GDN 16 key /
    32 value heads of 128, vocab 248,320: the figures ray_llm_eks.base.models reads from its config.json),
    with the vision tower's output width set to the text width (4,096)."""
    target.mkdir(parents=True, exist_ok=True)
    code = ("import sys; from transformers import Qwen3_5Config; "
            "c = Qwen3_5Config(vision_config={'out_hidden_size': 4096}, tie_word_embeddings=False); "
            "c.architectures = ['Qwen3_5ForConditionalGeneration']; c.text_config.max_position_embeddings = 262144; "
            "c.save_pretrained(sys.argv[1])")
    subprocess.run([python, "-c", code, str(target)], check=True)
    return target


BUDGET_MODEL = "Qwen/Qwen3.5-9B"
"""The one configured model whose real shape :func:`qwen3_5_9b_config` builds for ``budget``."""
BUDGET_SCRIPT = r'''
import json, sys
from vllm import LLM
args = json.loads(sys.argv[1])
llm = LLM(model=args["model"], load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
          gpu_memory_utilization=args["utilization"], max_model_len=args["max_model_len"],
          max_num_seqs=256, max_num_batched_tokens=2048, language_model_only=args["language_model_only"])
print("BUDGET_DONE", flush=True)
'''
AVAILABLE = re.compile(r"Available KV cache memory: ([0-9.]+) GiB")
CONCURRENCY = re.compile(r"Maximum concurrency for ([0-9,]+) tokens per request: ([0-9.]+)x")
WEIGHTS = re.compile(r"Model loading took ([0-9.]+) GiB")
BLOCKS = re.compile(r"GPU KV cache size: ([0-9,]+) tokens")


def budget(prepared: Path, venv: Path, workdir: Path, visible_gib: float | None = None) -> dict[str, Any]:
    """vLLM 0.26.0's own memory profile of the configured model's shape, in one configured GPU's
    budget: ``gpu_memory_utilization`` scaled so vLLM may use what it would on that GPU
    (utilization x ``visible_gib``, by default the CUDA-visible memory ``plan`` uses for the
    configured type), on whatever GPU this machine has."""
    import torch  # the machine's own

    meta = json.loads((prepared / "prepared.json").read_text())
    if meta["configured_model"] != BUDGET_MODEL:
        raise SystemExit(f"budget: builds {BUDGET_MODEL}'s shape only (configured: {meta['configured_model']})")
    python = str(venv / "bin" / "python")
    model = qwen3_5_9b_config(workdir / "qwen3_5_9b", python)
    total_gib = torch.cuda.mem_get_info()[1] / 1024**3
    plan = meta["plan_budgets"][0] if meta["plan_budgets"] else {}
    visible_gib = visible_gib or plan["gpu_memory_gib"]
    utilization = round(plan.get("gpu_memory_utilization", 0.9) * visible_gib / total_gib, 4)
    results: dict[str, Any] = {"visible_gib": visible_gib, "device_total_gib": round(total_gib, 3),
                               "utilization_on_device": utilization, "plan": meta["plan_budgets"], "cases": {}}
    for language_model_only in (True, False):
        args = {"model": str(model), "utilization": utilization, "max_model_len": meta["max_model_len"],
                "language_model_only": language_model_only}
        done = subprocess.run([python, "-c", BUDGET_SCRIPT, json.dumps(args)], capture_output=True, text=True,
                              timeout=420, env={"PATH": "/usr/bin:/bin", "HOME": str(workdir),
                                                "VLLM_USE_FLASHINFER_SAMPLER": "0"})
        log = done.stdout + done.stderr
        (workdir / f"budget-{'text' if language_model_only else 'vision'}.log").write_text(log)
        case: dict[str, Any] = {"returncode": done.returncode}
        for name, pattern in (("kv_pool_gib", AVAILABLE), ("weights_gib", WEIGHTS), ("kv_tokens", BLOCKS)):
            found = pattern.findall(log)
            case[name] = found[-1] if found else None
        found = CONCURRENCY.findall(log)
        case["max_concurrency"] = found[-1] if found else None
        if done.returncode:
            case["tail"] = log[-1500:]
        results["cases"]["language_model_only" if language_model_only else "with_vision"] = case
        print(f"budget {language_model_only=}: {json.dumps(case)[:2000]}", flush=True)
    (workdir / "budget.json").write_text(json.dumps(results, indent=2))
    return results


def wheel_folder_problem(wheels: Path) -> str | None:
    """Why ``--wheels`` cannot be installed from, or None."""
    if not wheels.is_dir():
        return f"--wheels: not a folder (got {str(wheels)!r}); accepted: a folder of .whl files (pip download -d DIR)"
    names = [p.name.lower() for p in wheels.glob("*.whl")]
    missing = [pin for pin in STACK if not any(n.startswith(pin.split("==")[0].split("[")[0].replace("-", "_") + "-"
                                                             + pin.split("==")[1]) for n in names)]
    if missing:
        return (f"--wheels: {wheels} lacks {', '.join(missing)} (got {len(names)} wheel(s)); accepted: a folder "
                f"holding {', '.join(STACK)} and their dependencies")
    return None


def gpu_problem() -> str | None:
    """Why this machine cannot run the GPU profile (no NVIDIA GPU), or None."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"--gpu: no NVIDIA GPU here (nvidia-smi: {error}); accepted: a Linux machine with one NVIDIA GPU"
    gpus = [line for line in listed.stdout.splitlines() if line.startswith("GPU ")]
    if listed.returncode or not gpus:
        return "--gpu: nvidia-smi lists no GPU; accepted: a Linux machine with one NVIDIA GPU"
    return None


def twin_gpu(config: Path | None, workdir: Path, *, wheels: Path | None, prepared: Path | None,
             keep_libfabric: bool, topologies: tuple[str, ...], log: Any = print) -> int:
    """``make twin-gpu`` / ``ray-llm-eks twin --gpu``: prepare (unless ``prepared``), install, run, budget.
    0: every gate passed, or failed only for a change the profile lists (:func:`unexplained_reasons`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    if prepared is None:
        prepared = workdir / "prepared"
        prepare(config or DEFAULT_CONFIG, prepared)
    venv = workdir / "venv"
    install(venv, wheels)
    results = run(prepared, venv, workdir / "run", keep_libfabric=keep_libfabric, topologies=topologies)
    meta = json.loads((prepared / "prepared.json").read_text())
    if meta["configured_model"] == BUDGET_MODEL:
        budget(prepared, venv, workdir / "budget")
    else:
        log(f"budget: skipped: it builds {BUDGET_MODEL}'s shape only (configured: {meta['configured_model']})")
    left = {t: unexplained_reasons(e, keep_libfabric) for t, e in results["topologies"].items()}
    log(f"twin --gpu: results in {workdir / 'run' / 'results.json'}; unexplained gate reasons: {json.dumps(left)}")
    return 0 if not any(left.values()) else 1


PROFILE_REASON = "the NIXL backend is UCX, not LIBFABRIC"
"""The gate's transport reason the profile's own UCX change causes (GPU_CHANGES: LIBFABRIC -> UCX)."""


def unexplained_reasons(entry: dict[str, Any], keep_libfabric: bool) -> list[str]:
    """A topology's gate reasons less those the profile's listed changes cause; a run that did not
    reach the gate gives its error or Serve's status."""
    gate = entry.get("gate")
    if gate is None:
        return [entry.get("error") or f"Serve status {entry.get('serve_status')}: {entry.get('serve_message', '')}"]
    to_ucx = any("backend UCX" in note for note in entry.get("notes") or ())
    return [r for r in gate.get("reasons") or () if not (to_ucx and not keep_libfabric and PROFILE_REASON in r)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ray_llm_eks.twin.gpu", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--out", type=Path, required=True)
    i = commands.add_parser("install")
    i.add_argument("--venv", type=Path, required=True)
    i.add_argument("--wheels", type=Path)
    for name in ("run", "budget"):
        r = commands.add_parser(name)
        r.add_argument("--prepared", type=Path, required=True)
        r.add_argument("--venv", type=Path, required=True)
        r.add_argument("--workdir", type=Path, required=True)
        if name == "run":
            r.add_argument("--keep-libfabric", action="store_true",
                           help="run LIBFABRIC as rendered even where it must register GPU memory over tcp")
            r.add_argument("--topology", choices=[*TOPOLOGIES, "both"], default="both")
        else:
            r.add_argument("--visible-gib", type=float,
                           help="the configured GPU's CUDA-visible memory in GiB (default: plan's, an L4's 22.03)")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        print(json.dumps(prepare(args.config, args.out), indent=2))
    elif args.command == "install":
        install(args.venv, args.wheels)
    elif args.command == "run":
        args.workdir.mkdir(parents=True, exist_ok=True)
        topologies = TOPOLOGIES if args.topology == "both" else (args.topology,)
        results = run(args.prepared, args.venv, args.workdir, keep_libfabric=args.keep_libfabric, topologies=topologies)
        return 0 if all((e.get("gate") or {}).get("verdict") == "pass" for e in results["topologies"].values()) else 1
    else:
        args.workdir.mkdir(parents=True, exist_ok=True)
        budget(args.prepared, args.venv, args.workdir, args.visible_gib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
