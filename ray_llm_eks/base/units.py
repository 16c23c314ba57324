"""Byte units, binary as AWS and Kubernetes count them (GiB volumes, ``Gi`` memory, MiB/s gp3 throughput)."""

KIB = 2**10
MIB = 2**20
GIB = 2**30
