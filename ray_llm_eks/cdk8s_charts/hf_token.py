"""The Hugging Face token of a gated model: an init container reads it from Secrets Manager into
a memory-backed volume of the worker pod (the token never enters a manifest)."""

from __future__ import annotations

from cdk8s_plus_35 import k8s

from ..base.serving import ServingSpec
from .containers import env_vars

HF_TOKEN_VOLUME = "hf-token"
HF_TOKEN_INIT_CONTAINER = "hf-token"
HF_TOKEN_DIR = "/var/run/secrets/huggingface"
HF_TOKEN_FILE = f"{HF_TOKEN_DIR}/token"
HF_TOKEN_SCRIPT = """\
import os, sys
try:
    import boto3
except ImportError:
    sys.exit("hf-token: the serving image has no boto3, so the Hugging Face token cannot be read from "
             "Secrets Manager; use an image with boto3 (botocore 1.32 or later, for EKS Pod Identity)")
secret_id = os.environ["HF_TOKEN_SECRET"]
client = boto3.client("secretsmanager", region_name=os.environ["AWS_REGION"])
token = (client.get_secret_value(SecretId=secret_id).get("SecretString") or "").strip()
if not token:
    sys.exit(f"hf-token: secret {secret_id} has no SecretString")
path = os.environ["HF_TOKEN_PATH"]
partial = path + ".partial"
if os.path.exists(partial):
    os.unlink(partial)
fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
os.write(fd, token.encode())
os.close(fd)
os.replace(partial, path)  # a rerun of this container (same pod) replaces its own read-only file
print(f"hf-token: wrote the token from {secret_id}")
"""


def hf_token_region(spec: ServingSpec) -> str:
    """The secret's own region when an ARN names it, else the deployment's."""
    secret = spec.model.hf_token_secret or ""
    return secret.split(":")[3] if secret.startswith("arn:") else spec.region


def hf_token_init_container(spec: ServingSpec) -> k8s.Container:
    """Reads the Hugging Face token from Secrets Manager into a memory-backed volume of this pod.

    The token never enters the template, the manifests or the pod spec: this container fetches
    it at start with the pod's own role (EKS Pod Identity; the role may read this one secret) and
    writes it, mode 0400 and owned by the image's user (no ``runAsUser``: the Ray container runs
    as the same user), where ``HF_TOKEN_PATH`` points huggingface_hub (v0.23+ reads that variable).
    It uses the serving image's Python and boto3 (in the rayproject base image; botocore gained
    Pod Identity credentials in 1.32), so nothing else is pulled.
    """
    amounts = {"cpu": k8s.Quantity.from_string("250m"), "memory": k8s.Quantity.from_string("256Mi")}
    return k8s.Container(
        name=HF_TOKEN_INIT_CONTAINER,
        image=spec.image_uri,
        command=["python3", "-c", HF_TOKEN_SCRIPT],
        env=env_vars({"HF_TOKEN_SECRET": spec.model.hf_token_secret or "", "AWS_REGION": hf_token_region(spec),
                  "HF_TOKEN_PATH": HF_TOKEN_FILE}),
        resources=k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        security_context=k8s.SecurityContext(
            privileged=False, allow_privilege_escalation=False, read_only_root_filesystem=True,
            capabilities=k8s.Capabilities(drop=["ALL"]), seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault")),
        volume_mounts=[k8s.VolumeMount(name=HF_TOKEN_VOLUME, mount_path=HF_TOKEN_DIR)],
    )
