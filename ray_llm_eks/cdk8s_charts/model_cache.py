"""The workers' Hugging Face cache: a hostPath directory on the GPU node's root volume, and the
init container that gives it to the image's user. Workers only: the head loads no model."""

from __future__ import annotations

from cdk8s_plus_35 import k8s

from ..base.serving import ServingSpec

HF_CACHE_HOST_PATH = "/var/lib/ray-llm-eks/hf-cache"
"""Node directory (hostPath, ``DirectoryOrCreate``) that holds the Hugging Face cache of workers.

Without it, vLLM downloads the checkpoint (18 GiB for Qwen3.5-9B) into the container's writable
layer on every pod start, through the NAT gateway, and loses it when the pod restarts; the GPU
node's root volume (sized and provisioned at 1000 MiB/s for the checkpoint, see
``base.pools.RootVolume``) was then never read. Under ``/var/lib`` it lives on that root
volume on the EKS AL2023 AMI. The first pod on a node downloads; later pods on the same node
(restarts, RayService re-creation) load from disk. It is node-local and shared by the worker
pods of that node; the GPU nodes are dedicated (taint), so only this deployment's workers
mount it. The hub cache stores one snapshot per commit, so a pinned revision is not mixed up
with another.
"""

HF_CACHE_MOUNT_PATH = "/var/cache/huggingface"
"""Where :data:`HF_CACHE_HOST_PATH` appears in the worker container; ``HF_HOME`` points here.

``HF_HOME`` is the root of every ``huggingface_hub`` cache, which vLLM (and Ray Serve LLM, which
hands Hugging Face ids to vLLM) downloads through: the hub cache defaults to ``$HF_HOME/hub``
(``HF_HUB_CACHE``), the Xet chunk cache to ``$HF_HOME/xet``.
"""

HF_CACHE_VOLUME = "hf-cache"
HF_CACHE_INIT_CONTAINER = "hf-cache-permissions"


def hf_cache_volume() -> k8s.Volume:
    return k8s.Volume(
        name=HF_CACHE_VOLUME,
        host_path=k8s.HostPathVolumeSource(path=HF_CACHE_HOST_PATH, type="DirectoryOrCreate"),
    )


HF_CACHE_MODE = "0750"
HF_CACHE_CAPABILITIES = ("CHOWN", "FOWNER")
"""All the init container adds (the admission policy grants the Ray pods these and no other)."""


def hf_cache_init_container(spec: ServingSpec) -> k8s.Container:
    """Gives the node's model cache to the image's user, and only to it.

    The kubelet creates a ``DirectoryOrCreate`` hostPath as root, mode 0755, which a non-root
    image user could not write. This container runs as root (a non-root process gets no effective
    capability from ``capabilities.add``: Kubernetes sets no ambient capabilities) with every
    capability dropped but CHOWN and FOWNER, no privilege escalation, a read-only root filesystem
    and the runtime's default seccomp profile, and makes the directory ``<user_id>:<group_id>`` mode 0750: the Ray process writes the
    weights, its group reads them, nobody else on the node does (the admission policy keeps other
    pods from mounting host paths at all). An image that runs as root writes there anyway. Same
    image as the Ray container, so nothing else is pulled. Requests equal limits, so the pod
    stays in the Guaranteed QoS class (which counts init containers too); an init container's
    request is below the Ray container's, so it changes nothing in scheduling.
    """
    amounts = {"cpu": k8s.Quantity.from_string("100m"), "memory": k8s.Quantity.from_string("64Mi")}
    owner = f"{spec.image.user_id}:{spec.image.group_id}"
    # FOWNER beside CHOWN: the directory outlives the pod, so from the second pod on a node it
    # already belongs to the image user, and root may change its mode only with CAP_FOWNER
    # (chmod(2)). With both, the command is the same on every run.
    return k8s.Container(
        name=HF_CACHE_INIT_CONTAINER,
        image=spec.image_uri,
        command=["sh", "-c", f'chown {owner} "$0" && chmod {HF_CACHE_MODE} "$0"', HF_CACHE_MOUNT_PATH],
        resources=k8s.ResourceRequirements(requests=dict(amounts), limits=dict(amounts)),
        security_context=k8s.SecurityContext(
            run_as_user=0,
            run_as_non_root=False,
            privileged=False,
            allow_privilege_escalation=False,
            read_only_root_filesystem=True,
            capabilities=k8s.Capabilities(drop=["ALL"], add=list(HF_CACHE_CAPABILITIES)),
            seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
        ),
        volume_mounts=[k8s.VolumeMount(name=HF_CACHE_VOLUME, mount_path=HF_CACHE_MOUNT_PATH)],
    )
