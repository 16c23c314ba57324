"""Checks of ray_llm_eks.pd.conditional against Ray Serve LLM 2.58's own classes, run by the twin's
Python (Ray Serve LLM's protocol models need vLLM, which only .venv-twin has):
``.venv-twin/bin/python tests/pd/conditional_checks.py NAME[,NAME...] [ARGS]`` (tests/pd/test_conditional_server.py runs each)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ray.llm._internal.serve.core.configs.openai_api_models import (  # noqa: E402
    ChatCompletionRequest, CompletionRequest, TokenizeChatRequest, TokenizeCompletionRequest)
from ray.llm._internal.serve.core.server.llm_server import LLMServer  # noqa: E402
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import PDOrchestratorMixin  # noqa: E402

from ray_llm_eks.base import wire  # noqa: E402
from ray_llm_eks.pd import conditional  # noqa: E402


def check_route_boundary() -> None:
    assert conditional.route(1023, 1024) == wire.PD_LOCAL
    assert conditional.route(1024, 1024) == wire.PD_REMOTE  # "fewer tokens than N" is local; N itself remote
    assert conditional.route(None, 1024) == wire.PD_REMOTE  # uncounted: today's path
    assert conditional.route(0, 0) == wire.PD_REMOTE


def check_threshold_key() -> None:
    assert conditional.threshold_of({wire.PD_THRESHOLD_KEY: 512, "NIXL_SIDE_CHANNEL_PORT_BASE": 22000}) == 512
    assert conditional.threshold_of({}) == 0
    for bad in (-1, True, "512", 1.5):
        try:
            conditional.threshold_of({wire.PD_THRESHOLD_KEY: bad})
        except ValueError as error:
            assert wire.PD_THRESHOLD_KEY in str(error)
        else:
            raise AssertionError(bad)


def check_chat_tokenize_request_carries_the_template_inputs() -> None:
    request = ChatCompletionRequest(
        model="m", messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        chat_template="{{ messages[0].content }}", chat_template_kwargs={"enable_thinking": False},
        add_generation_prompt=False, continue_final_message=True, add_special_tokens=True,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])
    (tokenize,), ids = conditional.tokenize_requests(request)
    assert isinstance(tokenize, TokenizeChatRequest) and ids == 0
    for name in ("model", "chat_template", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
                 "add_special_tokens", "tools", "mm_processor_kwargs"):
        assert getattr(tokenize, name) == getattr(request, name), name
    assert [m["content"] for m in tokenize.messages] == ["be brief", "hi"]
    # What vLLM's chat endpoint defaults to, unchanged when the client says nothing.
    (plain,), _ = conditional.tokenize_requests(ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}]))
    assert plain.add_generation_prompt is True and plain.add_special_tokens is False


def check_completion_prompts() -> None:
    (text,), ids = conditional.tokenize_requests(CompletionRequest(model="m", prompt="hello", add_special_tokens=False))
    assert isinstance(text, TokenizeCompletionRequest) and text.prompt == "hello" and not text.add_special_tokens
    assert ids == 0
    assert conditional.tokenize_requests(CompletionRequest(model="m", prompt=[5, 6, 7])) == ([], 3)
    assert conditional.tokenize_requests(CompletionRequest(model="m", prompt=[[1], [1, 2, 3, 4]])) == ([], 4)
    texts, ids = conditional.tokenize_requests(CompletionRequest(model="m", prompt=["a", "b c"]))
    assert [t.prompt for t in texts] == ["a", "b c"] and ids == 0


def check_local_path_is_the_orchestrators_own_local_call() -> None:
    """The local path calls LLMServer.chat/completions: what PDOrchestratorMixin's ``getattr(super(), method)``
    resolves to for its local decode step, so a short prompt runs the same engine pipeline, without
    kv_transfer_params."""
    cls = conditional.ConditionalPDDecodeServer
    mro = cls.__mro__
    assert mro.index(PDOrchestratorMixin) < mro.index(LLMServer)
    after_mixin = mro[mro.index(PDOrchestratorMixin) + 1:]
    for method in ("chat", "completions", "tokenize"):
        owner = next(c for c in after_mixin if method in vars(c))
        assert owner is LLMServer, (method, owner)
    assert {"chat", "completions"} <= set(vars(cls))


def _graph(app):
    """(name, class, options, bound kwargs with each bound deployment's graph) of a built application."""
    deployment = app._bound_deployment
    kwargs = {k: (_graph(v) if hasattr(v, "_bound_deployment") else
                  {kk: _graph(vv) for kk, vv in v.items()} if isinstance(v, dict) and v and
                  all(hasattr(vv, "_bound_deployment") for vv in v.values()) else
                  v.model_dump() if hasattr(v, "model_dump") else v)
              for k, v in deployment.init_kwargs.items() if k != "model_cards"}
    options = deployment._deployment_config.to_proto_bytes()
    return deployment.name, deployment.func_or_class, options, deployment.ray_actor_options, kwargs


def check_the_graph_is_rays_with_the_decode_class_swapped() -> None:
    from ray.serve.llm import build_pd_openai_app as rays
    import json
    args = json.loads(sys.argv[2])
    ours, theirs = _graph(conditional.build_pd_openai_app(args)), _graph(rays(args))

    def decode(graph):
        return graph[4]["llm_deployments"][next(iter(graph[4]["llm_deployments"]))]
    assert ours[0] == theirs[0] and ours[2:4] == theirs[2:4]  # the ingress: name, options
    assert ours[1].__name__ == theirs[1].__name__
    d_ours, d_theirs = decode(ours), decode(theirs)
    assert d_ours[0] == d_theirs[0] and d_ours[0].startswith("Decode:")
    assert d_ours[1] is conditional.ConditionalPDDecodeServer and d_theirs[1].__name__ == "PDDecodeServer"
    assert d_ours[2:] == d_theirs[2:]  # options, actor options, and the prefill deployment bound to it
    assert d_ours[4]["prefill_server"][0].startswith("Prefill:")


if __name__ == "__main__":
    # One interpreter for every check named (importing Ray Serve LLM and vLLM takes most of the time);
    # each prints "ok NAME" or "failed NAME: ..." so the tests can tell them apart.
    import traceback

    for name in sys.argv[1].split(","):
        try:
            globals()[f"check_{name}"]()
        except Exception:  # noqa: BLE001 - reported to the test of that name
            print(f"failed {name}: {traceback.format_exc()!r}", flush=True)
        else:
            print("ok", name, flush=True)
