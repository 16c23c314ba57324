"""Checks of ray_llm_eks.pd.conditional against Ray Serve LLM 2.58's own classes, run by the twin's
Python (Ray Serve LLM's protocol models need vLLM, which only .venv-twin has):
``.venv-twin/bin/python tests/pd/conditional_checks.py NAME[,NAME...] PD_SERVING_ARGS_JSON MODEL_DIR`` (tests/pd/test_conditional_server.py runs each)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ray.llm._internal.serve.core.configs.openai_api_models import (  # noqa: E402
    ChatCompletionRequest, CompletionRequest)
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


def _engine_on(model: str):
    """What :func:`conditional.rendered_prompt_tokens` reads from Ray's ``VLLMEngine`` (its
    ``_oai_serving_chat`` and ``_oai_serving_completion``), made of vLLM's own parts for ``model``: a real
    ``OnlineRenderer`` with the model's tokenizer and chat template, and vLLM's own
    ``render_chat_request``/``render_completion_request``/``_extract_prompt_len`` bodies bound to an
    object that has what those bodies read. Only the engine is missing (``_check_model`` accepts the
    request and ``engine_client`` says it is alive): nothing here needs one."""
    import types

    from vllm.config import ModelConfig, VllmConfig
    from vllm.entrypoints.openai.chat_completion.serving import OpenAIServingChat
    from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
    from vllm.entrypoints.serve.engine.serving import BaseServing
    from vllm.renderers import renderer_from_config
    from vllm.renderers.online_renderer import OnlineRenderer

    model_config = ModelConfig(model=model, tokenizer=model)
    online = OnlineRenderer(model_config=model_config, renderer=renderer_from_config(VllmConfig(model_config=model_config)),
                            request_logger=None, chat_template=None, chat_template_content_format="auto",
                            trust_request_chat_template=False, enable_auto_tools=False,
                            exclude_tools_when_tool_choice_none=False, tool_parser=None, reasoning_parser=None,
                            default_chat_template_kwargs=None, log_error_stack=False)

    async def accepted(_request):
        return None

    def serving(cls):
        one = types.SimpleNamespace(online_renderer=online, model_config=model_config, _check_model=accepted,
                                    engine_client=types.SimpleNamespace(errored=False))
        for name in ("render_chat_request", "render_completion_request"):
            if name in vars(cls):
                setattr(one, name, types.MethodType(vars(cls)[name], one))
        one._extract_prompt_len = types.MethodType(BaseServing._extract_prompt_len, one)
        return one
    return (types.SimpleNamespace(_oai_serving_chat=serving(OpenAIServingChat),
                                  _oai_serving_completion=serving(OpenAIServingCompletion)),
            online.renderer.get_tokenizer())


def check_the_count_is_the_prompt_the_engine_renders() -> None:
    """The count is the chat template's output in tokens (what the engine prefills), not the text's."""
    import asyncio

    engine, tokenizer = _engine_on(sys.argv[3])
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]

    def count(request):
        return asyncio.run(conditional.rendered_prompt_tokens(engine, request))
    templated = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    expected = len(tokenizer.encode(templated, add_special_tokens=False))
    chat = ChatCompletionRequest(model="tiny", messages=messages)
    assert count(chat) == expected > len(tokenizer.encode("hello there", add_special_tokens=False))
    assert chat.messages == ChatCompletionRequest(model="tiny", messages=messages).messages  # rendered from a copy
    # The request's template settings are the ones counted, as the chat endpoint renders them.
    bare = tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert count(ChatCompletionRequest(model="tiny", messages=messages, add_generation_prompt=False)) \
        == len(tokenizer.encode(bare, add_special_tokens=False)) < expected
    # A template in the request is refused by the chat endpoint (trust_request_chat_template is off, as
    # rendered), so it is not counted either: the prefill leg answers it, with the endpoint's own error.
    assert count(ChatCompletionRequest(model="tiny", messages=messages, chat_template="{{ messages[1].content }}")) \
        is None
    # Completions: text with the request's special-token setting, token ids as given, a batch's longest.
    assert count(CompletionRequest(model="tiny", prompt="hello there", add_special_tokens=False)) \
        == len(tokenizer.encode("hello there", add_special_tokens=False))
    assert count(CompletionRequest(model="tiny", prompt=[5, 6, 7])) == 3
    assert count(CompletionRequest(model="tiny", prompt=[[1], [1, 2, 3, 4]])) == 4
    # A model the engine does not serve: vLLM's error, so the prefill leg (today's path) answers it.
    async def refused(_request):
        from vllm.entrypoints.openai.engine.protocol import ErrorInfo, ErrorResponse
        return ErrorResponse(error=ErrorInfo(message="no such model", type="NotFoundError", code=404))
    engine._oai_serving_chat._check_model = refused
    assert count(chat) is None
    assert conditional.route(count(chat), 1024) == wire.PD_REMOTE


def check_rays_tokenize_path_is_still_unusable() -> None:
    """Why the count does not use ``LLMServer.tokenize``: Ray 2.58's engine looks for the tokenizer's
    serving object under a name vLLM no longer sets. When this fails, Ray or vLLM changed: the count
    may then use Ray's path."""
    import inspect

    from ray.llm._internal.serve.engines.vllm import vllm_engine
    from vllm.entrypoints.openai import api_server
    assert 'getattr(\n            state, "openai_serving_tokenization", None\n        )' in inspect.getsource(vllm_engine)
    source = inspect.getsource(api_server.init_app_state)
    assert "state.serving_tokenization = ServingTokenization(" in source
    assert "openai_serving_tokenization" not in source


def check_local_path_is_the_orchestrators_own_local_call() -> None:
    """The local path calls LLMServer.chat/completions: what PDOrchestratorMixin's ``getattr(super(), method)``
    resolves to for its local decode step, so a short prompt runs the same engine pipeline, without
    kv_transfer_params."""
    cls = conditional.ConditionalPDDecodeServer
    mro = cls.__mro__
    assert mro.index(PDOrchestratorMixin) < mro.index(LLMServer)
    after_mixin = mro[mro.index(PDOrchestratorMixin) + 1:]
    for method in ("chat", "completions"):
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
