"""``model.architecture: auto``: read the model's ``config.json`` where it is, when it is reachable.

The declared model (``ray_llm_eks.base``) does no I/O: it takes an architecture already resolved.
This module is the one place that reads one, for every entry point: :func:`ray_llm_eks.config.parse_config`
(hence ``make synth`` and ``ray-llm-eks plan``) calls :func:`resolve_auto` on the configuration
mapping, and code that builds a construct directly calls :func:`architecture_for` and passes
the result as ``ModelSpec(architecture=...)`` (the declared model refuses ``"auto"`` and says so).

Where ``config.json`` is read from, by ``model.source``:

- a model in the package's table (``ray_llm_eks.base.models.KNOWN_ARCHITECTURES``): the table's
  entry, with no I/O (so ``auto`` works offline for them);
- a local directory holding ``config.json`` (:func:`architecture_for` only, for code that builds a
  construct: a configuration's ``model.source`` must be one the pods can fetch, and a path is
  refused by the declared model, ``ray_llm_eks.base.serving.model_source_problem``);
- ``s3://bucket/prefix``: ``prefix/config.json``, with boto3's default credentials;
- a Hugging Face id: ``huggingface_hub.hf_hub_download`` (if installed) at ``model.revision``,
  with ``HF_TOKEN`` for gated repositories; ``HF_HUB_OFFLINE=1`` reads the local cache only.

``model.safetensors.index.json`` beside it is read only for a family whose parameters
config.json alone cannot count (:data:`ray_llm_eks.base.models.COUNTED_FAMILIES`).
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from .base.errors import SpecError, SpecErrors, problem
from .base.models import COUNTED_FAMILIES, ModelArchitecture, architecture_from_config, known_architecture
from .base.serving import ModelSpec, model_source_problem

AUTO = "auto"

TIMEOUT_SECONDS = 10.0
"""Bound on each network read: connect and read timeouts for S3 (botocore ``Config``), the Hub's
metadata request (``hf_hub_download(etag_timeout=...)``; its download timeout is
``HF_HUB_DOWNLOAD_TIMEOUT``, default 10 s, huggingface_hub ``constants.py``)."""

HUB_DEADLINE_SECONDS = 20.0
"""Bound on one Hub file read, retries included: huggingface_hub retries a failed request up to 5
times with backoff (``utils/_http.py`` ``_http_backoff_base``, 1.33.0), which took 28 s here with no
name resolution; past this deadline ``auto`` reports the Hub unreachable (the read goes on in a
daemon thread, which does not hold the process)."""

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_OFFLINE_VALUES = {"1", "on", "yes", "true"}  # huggingface_hub constants._is_true

WHAT_TO_DO = ("model.architecture written by hand from the model's config.json (docs/configuration.md, "
              "model.architecture; docs/plan.md, Supplying another model), or model.source as an s3:// URI "
              "holding config.json, or Hub access (network, HF_HUB_OFFLINE unset, HF_TOKEN for a "
              "gated repository, huggingface_hub installed)")


class ArchitectureUnavailable(Exception):
    """``auto`` could not read the model's config.json; the message says where it looked and why."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES


def _read_local(directory: Path, name: str) -> bytes | None:
    path = directory / name
    return path.read_bytes() if path.is_file() else None


def _s3_reader(uri: str):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    client = boto3.client("s3", config=Config(connect_timeout=TIMEOUT_SECONDS, read_timeout=TIMEOUT_SECONDS,
                                              retries={"max_attempts": 2}))

    def read(name: str) -> bytes | None:
        key = f"{prefix.rstrip('/')}/{name}" if prefix.strip("/") else name
        try:
            return client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise ArchitectureUnavailable(f"s3://{bucket}/{key}: {error}") from None
        except BotoCoreError as error:
            raise ArchitectureUnavailable(f"s3://{bucket}/{key}: {error}") from None

    return read


def _hub_reader(repo_id: str, revision: str | None, cache_dir: str | Path | None):
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError
    except ImportError:
        raise ArchitectureUnavailable(f"{repo_id} is a Hugging Face id, and huggingface_hub is not installed "
                                      "(pip install huggingface_hub)") from None
    offline = _offline()

    def download(name: str) -> str:
        result: list[Any] = []

        def run() -> None:
            try:
                result.append(hf_hub_download(repo_id, name, revision=revision, cache_dir=cache_dir,
                                              etag_timeout=TIMEOUT_SECONDS, local_files_only=offline))
            except BaseException as error:  # handed to the caller's thread below
                result.append(error)

        worker = threading.Thread(target=run, name=f"hf-{name}", daemon=True)
        worker.start()
        worker.join(HUB_DEADLINE_SECONDS)
        if not result:
            raise ArchitectureUnavailable(f"huggingface.co/{repo_id} {name}: no answer within "
                                          f"{HUB_DEADLINE_SECONDS:g} s")
        if isinstance(result[0], BaseException):
            raise result[0]
        return result[0]

    def read(name: str) -> bytes | None:
        try:
            path = download(name)
        except LocalEntryNotFoundError:
            why = ("HF_HUB_OFFLINE is set and the file is not in the local Hugging Face cache" if offline
                   else "the Hub did not answer and the file is not in the local Hugging Face cache")
            raise ArchitectureUnavailable(f"huggingface.co/{repo_id} {name}: {why}") from None
        except EntryNotFoundError:
            return None
        except (HfHubHTTPError, OSError, ValueError) as error:  # gated, not found, bad revision, network
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ArchitectureUnavailable(f"huggingface.co/{repo_id} {name}: {type(error).__name__}: {first}") from None
        return Path(path).read_bytes()

    return read


def _reader(source: str, revision: str | None, cache_dir: str | Path | None):
    """A function reading one file of the model's repository (None when absent), and where it reads."""
    if source.startswith("s3://"):
        return _s3_reader(source), source
    local = Path(source).expanduser()
    if local.is_dir():
        return (lambda name: _read_local(local, name)), str(local)
    if _HUB_ID.match(source) and not local.exists():
        where = f"huggingface.co/{source}" + (f" at revision {revision}" if revision else "")
        return _hub_reader(source, revision, cache_dir), where
    raise ArchitectureUnavailable(f"{source!r} is not a local directory, an s3:// URI or a Hugging Face id")


def architecture_for(source: str, revision: str | None = None, *,
                     cache_dir: str | Path | None = None) -> ModelArchitecture:
    """The architecture of ``source`` (a ``model.source``): the table's entry, or read from its
    config.json as the module docstring says. Raises :class:`ArchitectureUnavailable` when it
    cannot be read and :class:`~ray_llm_eks.base.errors.SpecErrors` when config.json describes
    something the memory check cannot size."""
    known = known_architecture(source)
    if known is not None:
        return known
    read, where = _reader(source, revision, cache_dir)
    raw = read("config.json")
    if raw is None:
        raise ArchitectureUnavailable(f"{where} has no config.json")
    try:
        config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise ArchitectureUnavailable(f"{where}/config.json is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ArchitectureUnavailable(f"{where}/config.json is not a JSON object")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    checkpoint_bytes = None
    if text is not config or text.get("model_type") not in COUNTED_FAMILIES:  # see architecture_from_config
        index = read("model.safetensors.index.json")
        if index is not None:
            try:
                total = json.loads(index).get("metadata", {}).get("total_size")
            except (ValueError, UnicodeDecodeError, AttributeError):
                total = None
            checkpoint_bytes = total if isinstance(total, int) and total > 0 else None
    read_from = f"{where}/config.json" + (" and model.safetensors.index.json" if checkpoint_bytes else "")
    return architecture_from_config(config, name=source, source=f"{read_from} (model.architecture: auto)",
                                    checkpoint_bytes=checkpoint_bytes)


def _default_source() -> str:
    return next(f.default for f in fields(ModelSpec) if f.name == "source")  # one default: ModelSpec's


def resolve_auto(data: dict[str, Any], *, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """The configuration mapping with ``model.architecture: auto`` replaced by the resolved
    architecture's fields; any other mapping unchanged. Raises ``SpecErrors`` on ``model.architecture``
    naming the source, the reason and :data:`WHAT_TO_DO` when config.json cannot be read or sized."""
    model = data.get("model")
    if not isinstance(model, dict) or model.get("architecture") != AUTO:
        return data
    source = model.get("source", _default_source())
    revision = model.get("revision")
    if model_source_problem(source) is not None:
        # Nothing to read (or nothing the pods could): the declared model refuses the source itself,
        # and "auto" names no architecture.
        return {**data, "model": {key: value for key, value in model.items() if key != "architecture"}}
    try:
        architecture = architecture_for(source, revision if isinstance(revision, str) else None, cache_dir=cache_dir)
    except ArchitectureUnavailable as error:
        raise SpecErrors([_needs_access(source, str(error))]) from None
    except SpecErrors as errors:
        raise SpecErrors([_needs_access(source, "; ".join(f"{e.field}: {e.message}" for e in errors))]) from None
    return {**data, "model": {**model, "architecture": asdict(architecture)}}


def _needs_access(source: str, reason: str) -> SpecError:
    return problem("model.architecture", AUTO, f"'auto' reads the config.json of model.source {source!r}, and "
                   f"could not: {reason}", WHAT_TO_DO)
